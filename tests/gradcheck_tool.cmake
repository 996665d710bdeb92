# tapegrad-gradcheck under ctest: `check all` passes in float64, each seeded
# bug fails with exit 1, the best h of central differences, Jacobians and
# their pictures, usage errors and refused specs exit 2, options and headers;
# vanished steps, JSON and CSV, batches over seeds, inputs under control,
# float32 at input scales 1e-3..1e3, the note on the predicted error, the
# predicted error beside the measured one in every mode; --mode fast; --order 2
# (tests/test_gradcheck_tool.sh).
if(TARGET tapegrad-gradcheck)
  foreach(_case modes_all modes_adjoint modes_usage order2 check_all inject fast sweep jacobian usage options list vanished formats batch inputs scale note predicted
                verdict_scale verdict_zero verdict_r verdict_order2 verdict_f32 verdict_linear verdict_dy verdict_exit cover schema docs)
    add_test(NAME gradcheck_tool_${_case}
             COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/tests/test_gradcheck_tool.sh
                     $<TARGET_FILE:tapegrad-gradcheck> ${_case})
    set_tests_properties(gradcheck_tool_${_case} PROPERTIES
      ENVIRONMENT_MODIFICATION "${TG_TEST_ENV}"
      TIMEOUT 1200)
  endforeach()
endif()
