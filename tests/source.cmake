# Checks of the source tree itself (docs/DESIGN.md, "Rooms and the direction
# of the arrows" and "What a library exports"):
#  - source_layering: the folders' includes, and the calls between the
#    libraries' object files, point one way (tests/source/layering.sh);
#  - source_exports: each library exports exactly the functions its public
#    headers declare (tests/source/exports.sh: the headers through GCC's
#    -aux-info, the built libraries through readelf).
add_test(NAME source_layering
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/tests/source/layering.sh ${CMAKE_CURRENT_SOURCE_DIR}
                 $<TARGET_OBJECTS:tapegrad> $<TARGET_OBJECTS:tapegrad_check> $<TARGET_OBJECTS:tapegrad_dist>
         COMMAND_EXPAND_LISTS)
add_test(NAME source_exports
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/tests/source/exports.sh ${CMAKE_CURRENT_SOURCE_DIR} ${CMAKE_C_COMPILER}
                 tapegrad=$<TARGET_FILE:tapegrad> check=$<TARGET_FILE:tapegrad_check>
                 dist=$<TARGET_FILE:tapegrad_dist>)
set_tests_properties(source_exports PROPERTIES SKIP_RETURN_CODE 77)
# gradcheck_tool_layering: the files of tools/gradcheck/ call one way, by
# the layers tools/gradcheck/tool.h declares, with no cycle, and no function
# of theirs runs over 80 lines without a reason (tests/source/tool_layering.sh).
if(TARGET tapegrad-gradcheck)
  add_test(NAME gradcheck_tool_layering
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/tests/source/tool_layering.sh
                   ${CMAKE_CURRENT_SOURCE_DIR}/tools/gradcheck $<TARGET_OBJECTS:tapegrad-gradcheck>
           COMMAND_EXPAND_LISTS)
endif()
