# examples/gpt under ctest (tests/examples/gpt.sh): both archs learn and
# sample, 1 and 2 threads agree bit for bit, resume is exact, bad input is
# refused, text is generated after a prompt and from --load, checkpointed
# activations change nothing. Small configurations: a few seconds each.
foreach(_case learns same resume errors generate checkpoint)
  add_test(NAME example_gpt_${_case}
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/tests/examples/gpt.sh ${CMAKE_BINARY_DIR} ${_case})
  set_tests_properties(example_gpt_${_case} PROPERTIES TIMEOUT 600)
endforeach()
