# tapegrad-gradcheck check --modes fwd,rev and --adjoint: the whole registry
# passes in float64, the adjoint test catches a 1e-6 bug that check passes,
# usage (tests/test_gradcheck_modes.sh).
if(TARGET tapegrad-gradcheck)
  foreach(_case all adjoint usage)
    add_test(NAME gradcheck_modes_${_case}
             COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/tests/test_gradcheck_modes.sh
                     $<TARGET_FILE:tapegrad-gradcheck> ${_case})
    set_tests_properties(gradcheck_modes_${_case} PROPERTIES
      ENVIRONMENT_MODIFICATION "${TG_TEST_ENV}"
      TIMEOUT 1200)
  endforeach()
endif()
