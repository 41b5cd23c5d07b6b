// One line on stderr the first time a program asks the drop-in libraries for something the
// emulated RNIC does not have, so that "perftest fails in ibv_create_ah" is visible without
// strace. Used by every export of libibverbs.so.1 (and, through it, of librdmacm.so.1).
#pragma once

namespace iwarp::verbs_abi {

// Writes "rnic verbs: CALL: WHAT\n" to stderr with a single write(2), once per distinct CALL and
// WHAT (compared as text, so one call that can fail for several reasons reports each reason
// once) per process. Thread-safe and lock-free; allocates nothing, never throws and preserves
// errno, so it can be called on any error path, including between setting errno and returning.
// The strings are only read during the call. A null CALL or WHAT is replaced by a placeholder.
void report_unsupported(const char* call, const char* what) noexcept;

}  // namespace iwarp::verbs_abi
