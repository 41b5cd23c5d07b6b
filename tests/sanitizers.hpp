// Which sanitizer the test program is built with, whichever compiler built it: gcc defines
// __SANITIZE_ADDRESS__ and __SANITIZE_THREAD__, clang 19 (the ASan build's compiler) answers
// only through __has_feature. Each macro is 0 or 1.
#pragma once

#if defined(__SANITIZE_ADDRESS__)
#define IWARP_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define IWARP_TEST_ASAN 1
#endif
#endif
#ifndef IWARP_TEST_ASAN
#define IWARP_TEST_ASAN 0
#endif

#if defined(__SANITIZE_THREAD__)
#define IWARP_TEST_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define IWARP_TEST_TSAN 1
#endif
#endif
#ifndef IWARP_TEST_TSAN
#define IWARP_TEST_TSAN 0
#endif

// UndefinedBehaviorSanitizer: clang says so; gcc defines nothing for it (gcc 14's __has_feature
// does not know it), and the project builds it only together with ASan (IWARP_SANITIZE).
#if defined(__clang__)
#if __has_feature(undefined_behavior_sanitizer)
#define IWARP_TEST_UBSAN 1
#else
#define IWARP_TEST_UBSAN 0
#endif
#else
#define IWARP_TEST_UBSAN IWARP_TEST_ASAN
#endif
