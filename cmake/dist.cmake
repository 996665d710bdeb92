# The library tapegrad_dist (tapegrad::dist): data-parallel training,
# data_parallel/*.c behind include/tapegrad/dist.h. Included by CMakeLists.txt after
# the programs are defined (it links the ones that use it).
#
# TG_MPI (default: ON when MPI is found) builds it over MPI; OFF builds the
# same API over a world of one process. The library tapegrad never depends
# on MPI either way. The choice is cached: after installing MPI, configure
# again with -DTG_MPI=ON.
if(NOT DEFINED TG_MPI OR TG_MPI)
  find_package(MPI COMPONENTS C QUIET)
endif()
set(_tg_mpi_default OFF)
if(MPI_C_FOUND)
  set(_tg_mpi_default ON)
endif()
option(TG_MPI "Build tapegrad::dist over MPI (default ON when MPI is found)" ${_tg_mpi_default})
if(TG_MPI AND NOT MPI_C_FOUND)
  message(FATAL_ERROR "TG_MPI is ON but CMake found no MPI for C: install Open MPI "
                      "(scripts/deps.sh mpi) or configure with -DTG_MPI=OFF")
endif()

file(GLOB TG_DIST_SOURCES CONFIGURE_DEPENDS data_parallel/*.c)
tg_add_library_above(tapegrad_dist dist ${TG_DIST_SOURCES})
tg_internal_twin(tapegrad_dist tapegrad_internal m $<$<BOOL:${TG_MPI}>:MPI::MPI_C>)
# the version in the build fingerprint the ranks compare (data_parallel/world.c)
target_compile_definitions(tapegrad_dist PRIVATE TG_DIST_VERSION="${PROJECT_VERSION}")
if(TG_MPI)
  # only data_parallel/comm.c uses it
  target_link_libraries(tapegrad_dist PRIVATE MPI::MPI_C)
  target_compile_definitions(tapegrad_dist PRIVATE TG_HAVE_MPI=1)
endif()

# The programs that train across processes.
target_link_libraries(spiral PRIVATE tapegrad_dist_internal)
target_link_libraries(gpt PRIVATE tapegrad_dist_internal)
target_link_libraries(bench_dist PRIVATE tapegrad_dist_internal)
if(TG_MPI)
  # bench_dist starts its 2-process run itself, with this launcher; its
  # --allreduce compares the all-reduce with MPI's own (the library's
  # only MPI user stays data_parallel/comm.c).
  target_compile_definitions(bench_dist PRIVATE TG_MPIEXEC="${MPIEXEC_EXECUTABLE}" TG_HAVE_MPI=1)
  target_link_libraries(bench_dist PRIVATE MPI::MPI_C)
endif()

# Installed with the others (CMakeLists.txt: the export set, and
# tapegrad-dist.pc from cmake/tapegrad-dist.pc.in). A static
# libtapegrad_dist needs MPI's libraries on its users' link lines.
set(TG_PC_DIST_LIBS "-ltapegrad_dist")
set(TG_PC_DIST_LIBS_PRIVATE "")
if(TG_MPI)
  list(JOIN MPI_C_LIBRARIES " " _tg_mpi_libs)
  if(BUILD_SHARED_LIBS)
    set(TG_PC_DIST_LIBS_PRIVATE "${_tg_mpi_libs}")
  else()
    string(APPEND TG_PC_DIST_LIBS " ${_tg_mpi_libs}")
  endif()
endif()
