// The one emulated device: discovery (ibv_get_device_list), contexts (ibv_open_device, laid out
// as rdma-core 44's verbs_context so the inline verbs in <infiniband/verbs.h> find their
// operations), and what the device and its port report (ibv_query_device/port/gid), which
// perftest and qperf read to choose their modes: node type RNIC, transport iWARP, an Ethernet
// port, the engine's real limits.
#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "common/log.hpp"
#include "rnic/device.hpp"
#include "rnic/queue_pair.hpp"
#include "rnic/segment_tap.hpp"
#include "rnic/verbs_translation.hpp"
#include "verbs_abi/context.hpp"
#include "verbs_abi/settings.hpp"
#include "verbs_abi/unsupported.hpp"

#undef ibv_query_port

namespace iwarp::verbs_abi {

namespace {

std::mutex engine_mu;
rnic::Device* the_engine = nullptr;  // leaked on purpose: see context.hpp
// the_engine, for the at-exit stop (read without engine_mu: another thread may hold it then).
std::atomic<rnic::Device*> engine_to_stop{nullptr};
ibv_context* the_shared_context = nullptr;

void forget_after_fork() {
  // The child has no engine thread: start a new engine on first use there (qperf's server
  // forks a child per test, and only the child uses verbs). Whatever the parent had is leaked.
  new (&engine_mu) std::mutex;
  // The parent's `rnic stat` listener is not ours to answer on (docs/stat.md).
  if (the_engine) the_engine->forget_stat_in_forked_child();
  the_engine = nullptr;
  engine_to_stop = nullptr;
  the_shared_context = nullptr;
  forget_verbs_after_fork();
  forget_cm_after_fork();
}

// exit(): the engine thread stops before the static objects of the libraries loaded before
// this one are destroyed, or it would run on in them: a program that exits with connections up
// crashed now and then (SIGSEGV after its last line). The destructor of an object built when
// this library is loaded runs after every at-exit handler and static destructor of the
// program (they were registered later), so the program's own cleanup at exit (atexit(),
// global objects: rdma_disconnect, waiting for DISCONNECTED, destroying QPs) still has an
// engine, as it has a NIC on hardware. Bounded: an engine stuck in a handler is left running.
struct StopEngineAtExit {
  ~StopEngineAtExit() {
    rnic::Device* d = engine_to_stop.load();
    if (!d || d->on_engine_thread()) return;
    // RNIC_REAL_SEGMENTS: the tap's reader posts to the engine from its own thread; nothing more
    // once the engine stops.
    if (auto* tap = segment_tap()) tap->detach_all();
    const bool stopped = d->stop(std::chrono::seconds(2));
    log::layer("rnic").debug("at exit: the engine thread {}",
                             stopped ? "stopped" : "is still in a handler after 2 s; left running");
  }
};
StopEngineAtExit stop_engine_at_exit;

// The interface address the GID and GUIDs are made from: the first IPv4 address of an
// interface that is up and not loopback, else 127.0.0.1.
in_addr interface_address() {
  in_addr best{htonl(INADDR_LOOPBACK)};
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return best;
  for (auto* i = list; i; i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET) continue;
    if (!(i->ifa_flags & IFF_UP) || (i->ifa_flags & IFF_LOOPBACK)) continue;
    best = reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr;
    break;
  }
  ::freeifaddrs(list);
  return best;
}

// ::ffff:a.b.c.d, the IPv4-mapped address (what the iWARP CM addresses by).
ibv_gid make_gid() {
  ibv_gid g{};
  g.raw[10] = g.raw[11] = 0xff;
  const in_addr a = interface_address();
  std::memcpy(&g.raw[12], &a, 4);
  return g;
}

// An EUI-64 from the address: 02:'r':'n' + the IPv4 address + 'c'. Network order, as
// ibv_get_device_guid returns it.
__be64 make_guid() {
  const in_addr a = interface_address();
  std::uint8_t b[8] = {0x02, 'r', 'n', 0, 0, 0, 0, 'c'};
  std::memcpy(&b[3], &a, 4);
  __be64 g;
  std::memcpy(&g, b, 8);
  return g;
}

ibv_device* make_device() {
  static ibv_device dev{};
  dev.node_type = IBV_NODE_RNIC;
  dev.transport_type = IBV_TRANSPORT_IWARP;
  std::snprintf(dev.name, sizeof dev.name, "%s", settings().device_name.c_str());
  std::snprintf(dev.dev_name, sizeof dev.dev_name, "uverbs0");
  // No such paths: nothing here lives in sysfs or /dev (ibv_read_sysfs_file finds nothing).
  std::snprintf(dev.dev_path, sizeof dev.dev_path, "/dev/null/rnic-emulated/uverbs0");
  std::snprintf(dev.ibdev_path, sizeof dev.ibdev_path, "/dev/null/rnic-emulated/%s", dev.name);
  return &dev;
}

int query_port_op(ibv_context*, std::uint8_t port, ibv_port_attr* a, size_t len);
int query_device_ex_op(ibv_context* c, const ibv_query_device_ex_input* in, ibv_device_attr_ex* a,
                       size_t len);

}  // namespace

int fail(int err) {
  errno = err;
  return err;
}

int fail_neg(int err) {
  errno = err;
  return -1;
}

rnic::Device* engine() {
  static std::once_flag atfork_once;
  std::call_once(atfork_once, [] { ::pthread_atfork(nullptr, nullptr, forget_after_fork); });
  std::lock_guard l(engine_mu);
  if (the_engine) return the_engine;
  const Settings& s = settings();
  if (!s.error.empty()) {
    errno = EINVAL;
    return nullptr;
  }
  // The engine thread inherits this mask: no signal of the program is ever delivered to it.
  sigset_t all, old;
  ::sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &old);
  try {
    the_engine = new rnic::Device(s.device_name);
    the_engine->set_busy_poll(s.busy_poll);
    engine_to_stop = the_engine;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rnic verbs: cannot start the emulated RNIC: %s\n", e.what());
    errno = ENOMEM;
  }
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  return the_engine;
}

ibv_device* the_device() {
  static ibv_device* d = make_device();
  return d;
}

ibv_context* shared_context() {
  {
    std::lock_guard l(engine_mu);
    if (the_shared_context) return the_shared_context;
  }
  ibv_context* c = ibv_open_device(the_device());
  if (!c) return nullptr;
  std::lock_guard l(engine_mu);
  if (!the_shared_context) {
    the_shared_context = c;
  } else {
    ibv_close_device(c);
  }
  return the_shared_context;
}

void device_attr(ibv_device_attr* a) {
  std::memset(a, 0, sizeof *a);
  const rnic::DeviceLimits lim;  // the engine's (Device::limits() of every device)
  std::snprintf(a->fw_ver, sizeof a->fw_ver, "rnic-emulated 0.1");
  a->node_guid = make_guid();
  a->sys_image_guid = make_guid();
  a->max_mr_size = ~0ull;
  a->page_size_cap = 4096;
  // Not an id perftest special-cases: it then uses ibv_post_send and no inline data, as for
  // siw (whose id is 0x626d74). "rnc".
  a->vendor_id = 0x726e63;
  a->vendor_part_id = 1;
  a->hw_ver = 1;
  a->max_qp = kMaxQp;
  a->max_qp_wr = static_cast<int>(lim.max_qp_wr);
  a->device_cap_flags = IBV_DEVICE_MEM_MGT_EXTENSIONS;
  a->max_sge = static_cast<int>(lim.max_sge);
  a->max_sge_rd = static_cast<int>(lim.max_sge);
  a->max_cq = kMaxCq;
  a->max_cqe = static_cast<int>(lim.max_cqe);
  a->max_mr = kMaxMr;
  a->max_pd = kMaxPd;
  // RFC 5040 §6.3 / RFC 6581: the Read queue depths the RNIC negotiates at most.
  a->max_qp_rd_atom = lim.max_ird;
  a->max_qp_init_rd_atom = lim.max_ord;
  a->max_res_rd_atom = lim.max_ird * static_cast<int>(kMaxQp);
  a->max_ee_rd_atom = 0;
  a->max_srq = kMaxSrq;
  a->max_srq_wr = static_cast<int>(lim.max_qp_wr);
  a->max_srq_sge = static_cast<int>(lim.max_sge);
  // RFC 7306 atomics (Compare and Swap, Fetch and Add) are done by the responder, atomically
  // with respect to other atomics on the device.
  a->atomic_cap = IBV_ATOMIC_HCA;
  a->max_pkeys = 1;
  a->local_ca_ack_delay = 0;
  a->phys_port_cnt = 1;
}

namespace {

int query_port_op(ibv_context*, std::uint8_t port, ibv_port_attr* a, size_t len) {
  if (port != 1 || !a) return fail(EINVAL);
  ibv_port_attr p{};
  p.state = IBV_PORT_ACTIVE;
  p.max_mtu = IBV_MTU_4096;
  p.active_mtu = IBV_MTU_4096;
  p.gid_tbl_len = 1;
  // As siw reports an iWARP port: CM and device management supported.
  p.port_cap_flags = IBV_PORT_CM_SUP | IBV_PORT_DEVICE_MGMT_SUP;
  p.max_msg_sz = 0xffffffffu;  // RFC 5040 message lengths are 32 bits
  p.pkey_tbl_len = 1;
  p.active_width = 2;   // 4X
  p.active_speed = 32;  // EDR: a figure, the emulator runs at what TCP gives it
  p.phys_state = 5;     // LinkUp
  p.link_layer = IBV_LINK_LAYER_ETHERNET;
  std::memset(a, 0, len);  // as rdma-core: what a newer caller's struct has beyond ours is 0
  std::memcpy(a, &p, std::min(len, sizeof p));
  return 0;
}

int query_device_ex_op(ibv_context* c, const ibv_query_device_ex_input* in, ibv_device_attr_ex* a,
                       size_t len) {
  if (!c || !a || len < sizeof(ibv_device_attr)) return fail(EINVAL);
  if (in && in->comp_mask) return fail(EINVAL);
  std::memset(a, 0, len);
  device_attr(&a->orig_attr);
  return 0;
}

}  // namespace

ibv_qp_state to_ibv_state(rnic::QpState s) {
  static_assert(IBV_QPS_INIT == 1 && IBV_QPS_SQE == 5 && IBV_QPS_ERR == 6,
                "ibv_qp_state_value follows libibverbs' numbering");
  return static_cast<ibv_qp_state>(rnic::ibv_qp_state_value(s));
}

void fill_ops(ibv_context_ops* ops);  // verbs.cpp

}  // namespace iwarp::verbs_abi

using namespace iwarp::verbs_abi;

extern "C" {

ibv_device** ibv_get_device_list(int* num_devices) {
  if (num_devices) *num_devices = 0;
  if (!settings().error.empty()) {
    errno = EINVAL;
    return nullptr;
  }
  auto** list = static_cast<ibv_device**>(std::calloc(2, sizeof(ibv_device*)));
  if (!list) {
    errno = ENOMEM;
    return nullptr;
  }
  list[0] = the_device();
  if (num_devices) *num_devices = 1;
  return list;
}

void ibv_free_device_list(ibv_device** list) {
  std::free(list);
}

const char* ibv_get_device_name(ibv_device* device) {
  if (!device) {
    errno = EINVAL;
    return nullptr;
  }
  return device->name;
}

__be64 ibv_get_device_guid(ibv_device* device) {
  if (!device) return 0;
  return make_guid();
}

int ibv_get_device_index(ibv_device* device) {
  return device ? 0 : -1;
}

ibv_context* ibv_open_device(ibv_device* device) {
  if (device != the_device()) {
    errno = device ? ENODEV : EINVAL;
    return nullptr;
  }
  if (!engine()) return nullptr;
  auto* c = static_cast<Context*>(std::calloc(1, sizeof(Context)));
  if (!c) {
    errno = ENOMEM;
    return nullptr;
  }
  new (c) Context;
  std::memset(&c->vctx, 0, sizeof c->vctx);
  auto& vc = c->vctx;
  vc.sz = sizeof(verbs_context);
  vc.query_port = query_port_op;
  vc.query_device_ex = query_device_ex_op;
  ibv_context& ctx = vc.context;
  ctx.device = device;
  fill_ops(&ctx.ops);
  ctx.cmd_fd = -1;
  // A blocking eventfd that is never written: ibv_get_async_event waits on it, poll() never
  // reports it readable.
  c->async_fd = ::eventfd(0, EFD_CLOEXEC);
  ctx.async_fd = c->async_fd;
  ctx.num_comp_vectors = 1;
  ::pthread_mutex_init(&ctx.mutex, nullptr);
  ctx.abi_compat = __VERBS_ABI_IS_EXTENDED;
  return &ctx;
}

int ibv_close_device(ibv_context* context) {
  if (!context) return fail(EINVAL);
  {
    std::lock_guard l(engine_mu);
    if (context == the_shared_context) return 0;  // librdmacm's: lives as long as the process
  }
  Context* c = context_of(context);
  if (c->async_fd >= 0) ::close(c->async_fd);
  ::pthread_mutex_destroy(&context->mutex);
  c->~Context();
  std::free(c);
  return 0;
}

int ibv_query_device(ibv_context* context, ibv_device_attr* device_attr_out) {
  if (!context || !device_attr_out) return fail(EINVAL);
  device_attr(device_attr_out);
  return 0;
}

// The exported fallback of the inline ibv_query_port (rdma-core 44's _compat_ibv_port_attr is
// ibv_port_attr up to link_layer and flags, without port_cap_flags2 and what follows).
int ibv_query_port(ibv_context* context, std::uint8_t port_num, _compat_ibv_port_attr* port_attr) {
  return query_port_op(context, port_num, reinterpret_cast<ibv_port_attr*>(port_attr),
                       offsetof(ibv_port_attr, port_cap_flags2));
}

int ibv_query_gid(ibv_context* context, std::uint8_t port_num, int index, ibv_gid* gid) {
  if (!context || !gid || port_num != 1 || index != 0) return -1;
  *gid = make_gid();
  return 0;
}

int _ibv_query_gid_ex(ibv_context* context, std::uint32_t port_num, std::uint32_t gid_index,
                      ibv_gid_entry* entry, std::uint32_t flags, size_t entry_size) {
  if (!context || !entry || flags || entry_size < sizeof(ibv_gid_entry)) return EINVAL;
  if (port_num != 1) return EINVAL;
  if (gid_index != 0) return ENODATA;
  std::memset(entry, 0, sizeof *entry);
  entry->gid = make_gid();
  entry->gid_index = 0;
  entry->port_num = 1;
  entry->gid_type = IBV_GID_TYPE_IB;  // what the kernel reports for an iWARP port
  entry->ndev_ifindex = 0;
  return 0;
}

ssize_t _ibv_query_gid_table(ibv_context* context, ibv_gid_entry* entries, size_t max_entries,
                             std::uint32_t flags, size_t entry_size) {
  if (!context || !entries || flags || entry_size < sizeof(ibv_gid_entry)) return -EINVAL;
  if (max_entries < 1) return -EINVAL;
  if (int e = _ibv_query_gid_ex(context, 1, 0, entries, 0, entry_size)) return -e;
  return 1;
}

// rdma-core's private helper that ibv_devinfo imports (enum ibv_gid_type_sysfs: 0 = IB/RoCE v1).
int ibv_query_gid_type(ibv_context* context, std::uint8_t port_num, unsigned int index, int* type) {
  if (!context || !type || port_num != 1 || index != 0) return fail_neg(EINVAL);
  *type = 0;
  return 0;
}

int ibv_query_pkey(ibv_context* context, std::uint8_t port_num, int index, __be16* pkey) {
  if (!context || !pkey || port_num != 1 || index != 0) return -1;
  *pkey = htons(0xffff);
  return 0;
}

int ibv_get_pkey_index(ibv_context* context, std::uint8_t port_num, __be16 pkey) {
  if (!context || port_num != 1) return fail_neg(EINVAL);
  if (ntohs(pkey) != 0xffff) return fail_neg(ENOENT);
  return 0;
}

// rdma-core reads a sysfs attribute; the emulated device has none (ibv_devinfo then prints no
// board_id). Any other file is read as rdma-core would.
int ibv_read_sysfs_file(const char* dir, const char* file, char* buf, size_t size) {
  if (!dir || !file || !buf || size == 0) return -1;
  char path[512];
  if (std::snprintf(path, sizeof path, "%s/%s", dir, file) >= static_cast<int>(sizeof path))
    return -1;
  int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n = ::read(fd, buf, size);
  ::close(fd);
  if (n <= 0) return -1;
  if (static_cast<size_t>(n) == size) --n;
  if (n > 0 && buf[n - 1] == '\n') --n;
  buf[n] = '\0';
  return static_cast<int>(n);
}

int ibv_fork_init(void) {
  return 0;  // nothing is pinned: a child may touch any page
}

ibv_fork_status ibv_is_fork_initialized(void) {
  return IBV_FORK_UNNEEDED;
}

// The emulated device raises no asynchronous events: a blocking wait lasts until a signal
// (EINTR), a non-blocking one says EAGAIN, as rdma-core's read() of the async fd would.
int ibv_get_async_event(ibv_context* context, ibv_async_event* event) {
  if (!context || !event) return fail_neg(EINVAL);
  std::uint64_t v;
  if (::read(context->async_fd, &v, sizeof v) != sizeof v) return -1;
  return -1;
}

void ibv_ack_async_event(ibv_async_event*) {}

}  // extern "C"
