# Checks of the source tree itself: the folders' include directions
# (tests/source/layering.sh, docs/DESIGN.md "Rooms and the direction of the arrows").
add_test(NAME source_layering
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/tests/source/layering.sh ${CMAKE_CURRENT_SOURCE_DIR})
