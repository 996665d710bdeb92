# tapegrad::dist under ctest. test_dist (a Check suite, tests/test_dist.c)
# runs as one process in every build; with TG_MPI it also runs under
# mpirun with 2, 3 and 4 processes, and tests/dist/check.sh runs spiral
# and gpt across processes: bitwise equality with one process accumulating
# micro-batches, resuming with the same or another process count, a rank
# that fails, the recipes of docs/distributed.md. Without TG_MPI, check.sh checks what
# one process can: --micro, and the refusal of an mpirun start.
target_link_libraries(test_dist PRIVATE tapegrad_dist_internal)

# mpirun as root (CI containers), oversubscribed (4 processes on 2 cores:
# OpenMP threads that wait sleep instead of spinning, which would take the
# cores from the other ranks), and under the sanitizers: MPI's own allocations that it never
# frees are not ours (tests/dist/lsan.supp; its plugins stay loaded so the
# suppressions can name them).
set(TG_MPI_TEST_ENV
  "OMPI_ALLOW_RUN_AS_ROOT=set:1" "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=set:1" "OMP_WAIT_POLICY=set:passive"
  "OMPI_MCA_rmaps_base_oversubscribe=set:1" "OMPI_MCA_mca_base_component_disable_dlclose=set:1"
  "LSAN_OPTIONS=set:suppressions=${CMAKE_CURRENT_SOURCE_DIR}/tests/dist/lsan.supp:fast_unwind_on_malloc=0:print_suppressions=0")

# Every command of check.sh is bounded (a hang fails instead of waiting):
# 300 s, 1200 s in a sanitizer build, which runs spiral ~10x slower (on a
# loaded 2-core machine a 30-step run with 2 threads took 13 minutes).
set(_tg_dist_limit 300)
set(_tg_dist_timeout 900)
if(TG_SANITIZE)
  set(_tg_dist_limit 1200)
  set(_tg_dist_timeout 3600)
endif()
set(TG_DIST_CASES micro gpt_micro no_mpi save_every installed)
set(_tg_mpi 0)
if(TG_MPI)
  foreach(_np 2 3 4)
    add_test(NAME test_dist_np${_np}
             COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${_np} $<TARGET_FILE:test_dist>)
    set_tests_properties(test_dist_np${_np} PROPERTIES TIMEOUT 900 RESOURCE_LOCK mpi
      ENVIRONMENT_MODIFICATION "${TG_TEST_ENV};${TG_MPI_TEST_ENV}")
  endforeach()
  set(TG_DIST_CASES micro gpt_micro save_every installed bitwise resume failing_rank deadline mixed_builds flags_differ rank0_output readme_mpi
    gpt_bitwise gpt_resume gpt_failing gpt_readme)
  set(_tg_mpi 1)
endif()
foreach(_case IN LISTS TG_DIST_CASES)
  add_test(NAME dist_${_case}
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/tests/dist/check.sh ${CMAKE_BINARY_DIR} ${_case} ${_tg_mpi})
  set_tests_properties(dist_${_case} PROPERTIES TIMEOUT ${_tg_dist_timeout} RESOURCE_LOCK mpi
    ENVIRONMENT_MODIFICATION "${TG_TEST_ENV};${TG_MPI_TEST_ENV};TG_DIST_LIMIT=set:${_tg_dist_limit};TG_CMAKE=set:${CMAKE_COMMAND};TG_CC=set:${CMAKE_C_COMPILER};TG_LIBDIR=set:${CMAKE_INSTALL_LIBDIR};TG_SANITIZE=set:${TG_SANITIZE}")
endforeach()
