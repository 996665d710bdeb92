# User-defined ops (tapegrad/op.h): the example program, and a plugin built
# out of tree against the installed package and checked by the installed
# tapegrad-gradcheck (tests/install/plugin.sh).
add_test(NAME example_custom_op COMMAND ${CMAKE_BINARY_DIR}/examples/custom_op --steps 60)
add_test(NAME install_plugin
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/tests/install/plugin.sh
          ${CMAKE_BINARY_DIR} ${CMAKE_CURRENT_BINARY_DIR}/install-plugin-test
          ${CMAKE_COMMAND} ${CMAKE_C_COMPILER} "${TG_SANITIZE}")
set_tests_properties(install_plugin PROPERTIES
  ENVIRONMENT_MODIFICATION "${TG_TEST_ENV}"
  TIMEOUT 600)

# Each exercise: the reference solution passes (exit 0); the file as the
# learner gets it fails with exit 1 and a helpful message, not a crash.
foreach(_name IN LISTS TG_EXERCISE_NAMES)
  add_test(NAME exercise_${_name}
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/tests/test_exercise.sh ${CMAKE_BINARY_DIR}/examples/exercises ${_name})
  set_tests_properties(exercise_${_name} PROPERTIES ENVIRONMENT_MODIFICATION "${TG_TEST_ENV}" TIMEOUT 300)
endforeach()

# The tool as a learner uses it: diagnosis, explain (tests/test_learner_tool.sh).
if(TARGET tapegrad-gradcheck)
  foreach(_case diagnose explain)
    add_test(NAME gradcheck_tool_${_case}
             COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/tests/test_learner_tool.sh $<TARGET_FILE:tapegrad-gradcheck> ${_case})
    set_tests_properties(gradcheck_tool_${_case} PROPERTIES ENVIRONMENT_MODIFICATION "${TG_TEST_ENV}" TIMEOUT 600)
  endforeach()
endif()
