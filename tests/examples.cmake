# The examples under ctest: short runs whose loss must fall, determinism,
# the demo's PNG files, flags, the programs and recipes of the README and docs/ (built
# against an installed copy), resuming, and failures: gnuplot missing, a
# full disk, killed saves, error paths (tests/examples/check.sh); and
# make bench's FMA peak against a real kernel (tests/examples/fma_probe.c).
foreach(_case xor spiral charlm determinism pngs resume flags installed readme_resume resume_past resume_log
              no_gnuplot full_disk killed_save error_paths messages boundary_colours bench_fma_peak
              mixed_precision)
  add_test(NAME example_${_case}
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/tests/examples/check.sh ${CMAKE_BINARY_DIR} ${_case})
  set_tests_properties(example_${_case} PROPERTIES TIMEOUT 600
    ENVIRONMENT "TG_CMAKE=${CMAKE_COMMAND};TG_CC=${CMAKE_C_COMPILER};TG_LIBDIR=${CMAKE_INSTALL_LIBDIR};TG_SANITIZE=${TG_SANITIZE}")
endforeach()
