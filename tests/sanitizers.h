// Which sanitizer a test executable is built with (scripts/test.sh's
// --sanitize and --tsan stages).  Under them, tests shrink what only has to
// be long or large and loosen bounds on wake-ups, each where it says why; the
// plain stage runs every test at full size.
#pragma once

namespace terntest {

#if defined(__SANITIZE_THREAD__)
constexpr bool kUnderTsan = true;
#else
constexpr bool kUnderTsan = false;
#endif

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kUnderSanitizer = true;
#else
constexpr bool kUnderSanitizer = false;
#endif

}  // namespace terntest
