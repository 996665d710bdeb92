# The examples under ctest: short runs whose loss must fall, determinism,
# the demo's PNG files and the flag handling (tests/examples/check.sh).
foreach(_case xor spiral charlm determinism pngs resume flags)
  add_test(NAME example_${_case}
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/tests/examples/check.sh ${CMAKE_BINARY_DIR} ${_case})
  set_tests_properties(example_${_case} PROPERTIES TIMEOUT 600)
endforeach()
