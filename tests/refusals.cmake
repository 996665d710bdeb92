# What the programs refuse and say when given the wrong thing
# (tests/examples/refusals.sh): a device or a pipe named as a file to read
# (gpt, xor, tapegrad-gradcheck), the messages and statuses of settings
# that differ and of flag errors, and a picture gnuplot cut short.
foreach(_case devices messages picture)
  add_test(NAME refusals_${_case}
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/tests/examples/refusals.sh ${CMAKE_BINARY_DIR} ${_case})
  set_tests_properties(refusals_${_case} PROPERTIES TIMEOUT 600)
endforeach()
