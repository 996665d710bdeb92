# docs/performance.md's generator, scripts/perf_doc.py, on the small results
# of tests/fixtures/perf/ (tests/perf_doc.sh).
find_program(TG_PYTHON3 python3)
if(TG_PYTHON3)
  add_test(NAME perf_doc COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/tests/perf_doc.sh)
  set_tests_properties(perf_doc PROPERTIES TIMEOUT 60)
endif()
