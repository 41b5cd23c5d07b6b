# Runs after unit_tests links when IWARP_CTEST_PER_SUITE is on (the sanitizer builds): lists the
# program's tests and writes CTEST_FILE, which gives ctest one test per googletest suite
# (--gtest_filter=Suite.*) instead of one per test. A sanitized program spends about half a
# second starting (ASan registers and poisons every instrumented global, LeakSanitizer scans at
# exit), and a test per process started it some 870 times per run. --gtest_brief=1: a suite
# prints its failures only, so the tail scripts/test.sh shows of a failed ctest is the failure.
# Arguments (-D): TEST_EXE, CTEST_FILE, WORKING_DIR, TIMEOUT.
# The bound is wide: scripts/test.sh builds in the idle scheduling class while tests keep the
# cores busy, and a sanitized program then gets little processor time to start.
execute_process(COMMAND "${TEST_EXE}" --gtest_list_tests
                OUTPUT_VARIABLE listing RESULT_VARIABLE rc TIMEOUT 1200)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${TEST_EXE} --gtest_list_tests failed (${rc})")
endif()
string(REPLACE ";" "\\;" listing "${listing}")
string(REPLACE "\n" ";" lines "${listing}")
set(script "")
set(count 0)
foreach(line IN LISTS lines)
  # A suite line starts in column 0 and ends with its '.', before any "  # TypeParam" comment.
  if(line MATCHES "^([^ #][^ ]*)\\.( .*)?$")
    set(suite "${CMAKE_MATCH_1}")
    string(APPEND script
      "add_test([=[${suite}]=] [=[${TEST_EXE}]=] [=[--gtest_filter=${suite}.*]=] --gtest_brief=1)\n"
      "set_tests_properties([=[${suite}]=] PROPERTIES TIMEOUT ${TIMEOUT} "
      "WORKING_DIRECTORY [=[${WORKING_DIR}]=])\n")
    math(EXPR count "${count} + 1")
  endif()
endforeach()
if(count EQUAL 0)
  message(FATAL_ERROR "${TEST_EXE} --gtest_list_tests listed no suite")
endif()
file(WRITE "${CTEST_FILE}" "${script}")
