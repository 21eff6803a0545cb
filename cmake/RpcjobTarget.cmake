# Settings every target of the project's own code gets. Third-party headers are
# included as SYSTEM by their imported targets, so -Werror only judges our code.
function(rpcjob_target_defaults target)
  target_compile_features(${target} PUBLIC cxx_std_17)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Werror)
endfunction()

# rpcjob_add_test(NAME SOURCES... LIBS ... [LABELS ...] [TIMEOUT s])
# One GoogleTest executable registered with CTest as a whole (not per test case):
# the multi-process tests share set-up, and per-case discovery costs a process
# launch per case on a 2-core CI machine.
function(rpcjob_add_test name)
  cmake_parse_arguments(T "" "TIMEOUT" "SOURCES;LIBS;LABELS" ${ARGN})
  add_executable(${name} ${T_SOURCES})
  rpcjob_target_defaults(${name})
  target_link_libraries(${name} PRIVATE ${T_LIBS} GTest::gtest GTest::gmock GTest::gtest_main)
  add_test(NAME ${name} COMMAND ${name})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  set_tests_properties(${name} PROPERTIES TIMEOUT ${T_TIMEOUT} LABELS "${T_LABELS}")
endfunction()
