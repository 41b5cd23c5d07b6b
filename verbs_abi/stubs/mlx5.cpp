// Stub libmlx5.so.1 for perftest (verbs_abi/CMakeLists.txt). The ib_* binaries NEED
// libmlx5.so.1 and, being linked BIND_NOW, must resolve every mlx5dv_* symbol they import when
// they start, although they call them only on Mellanox devices (DC, mkeys, AES-XTS crypto). The
// real libmlx5 is a provider that imports rdma-core's private libibverbs interface, which the
// drop-in libibverbs does not have, so this stub takes its place: exactly the symbols perftest
// imports (libmlx5.map gives their versions), each failing as mlx5 does on a non-mlx5 device.
// It depends on nothing but libc.
#include <cerrno>
#include <cstddef>

#if __has_include(<infiniband/mlx5dv.h>)
#include <infiniband/mlx5dv.h>  // checks the declarations below against the real ones
#endif

extern "C" {

// Only pointers to these cross the ABI.
struct ibv_context;
struct ibv_device;
struct ibv_qp;
struct ibv_qp_ex;
struct ibv_qp_init_attr_ex;
struct mlx5dv_context_attr;
struct mlx5dv_crypto_login_attr;
struct mlx5dv_dek;
struct mlx5dv_dek_init_attr;
struct mlx5dv_mkey;
struct mlx5dv_mkey_init_attr;
struct mlx5dv_qp_ex;
struct mlx5dv_qp_init_attr;

// MLX5_1.3
ibv_qp* mlx5dv_create_qp(ibv_context* context, ibv_qp_init_attr_ex* qp_attr,
                         mlx5dv_qp_init_attr* mlx5_qp_attr);
// MLX5_1.7
ibv_context* mlx5dv_open_device(ibv_device* device, mlx5dv_context_attr* attr);
int mlx5dv_devx_general_cmd(ibv_context* context, const void* in, size_t inlen, void* out,
                            size_t outlen);
// MLX5_1.10
mlx5dv_mkey* mlx5dv_create_mkey(mlx5dv_mkey_init_attr* mkey_init_attr);
int mlx5dv_destroy_mkey(mlx5dv_mkey* mkey);
mlx5dv_qp_ex* mlx5dv_qp_ex_from_ibv_qp_ex(ibv_qp_ex* qp);
// MLX5_1.21
int mlx5dv_crypto_login(ibv_context* context, mlx5dv_crypto_login_attr* login_attr);
mlx5dv_dek* mlx5dv_dek_create(ibv_context* context, mlx5dv_dek_init_attr* init_attr);
int mlx5dv_dek_destroy(mlx5dv_dek* dek);

ibv_qp* mlx5dv_create_qp(ibv_context* /*context*/, ibv_qp_init_attr_ex* /*qp_attr*/,
                         mlx5dv_qp_init_attr* /*mlx5_qp_attr*/) {
  errno = EOPNOTSUPP;
  return nullptr;
}

ibv_context* mlx5dv_open_device(ibv_device* /*device*/, mlx5dv_context_attr* /*attr*/) {
  errno = EOPNOTSUPP;
  return nullptr;
}

int mlx5dv_devx_general_cmd(ibv_context* /*context*/, const void* /*in*/, size_t /*inlen*/,
                            void* /*out*/, size_t /*outlen*/) {
  return EOPNOTSUPP;
}

mlx5dv_mkey* mlx5dv_create_mkey(mlx5dv_mkey_init_attr* /*mkey_init_attr*/) {
  errno = EOPNOTSUPP;
  return nullptr;
}

int mlx5dv_destroy_mkey(mlx5dv_mkey* /*mkey*/) {
  return EOPNOTSUPP;
}

mlx5dv_qp_ex* mlx5dv_qp_ex_from_ibv_qp_ex(ibv_qp_ex* /*qp*/) {
  errno = EOPNOTSUPP;
  return nullptr;
}

int mlx5dv_crypto_login(ibv_context* /*context*/, mlx5dv_crypto_login_attr* /*login_attr*/) {
  return EOPNOTSUPP;
}

mlx5dv_dek* mlx5dv_dek_create(ibv_context* /*context*/, mlx5dv_dek_init_attr* /*init_attr*/) {
  errno = EOPNOTSUPP;
  return nullptr;
}

int mlx5dv_dek_destroy(mlx5dv_dek* /*dek*/) {
  return EOPNOTSUPP;
}

}  // extern "C"
