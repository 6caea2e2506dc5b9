# Generates build_info.cc at build time, so the JSON context names the commit
# that was built even when nothing re-runs CMake. The file is rewritten only
# when its content changes, so an unchanged commit recompiles nothing.
set(LTB_BUILD_INFO_CC "${CMAKE_BINARY_DIR}/generated/build_info.cc")
add_custom_target(ltb_build_info
  COMMAND ${CMAKE_COMMAND}
          -DSOURCE_DIR=${PROJECT_SOURCE_DIR}
          -DOUTPUT=${LTB_BUILD_INFO_CC}
          -DBUILD_TYPE=${CMAKE_BUILD_TYPE}
          -P ${PROJECT_SOURCE_DIR}/cmake/WriteBuildInfo.cmake
  BYPRODUCTS ${LTB_BUILD_INFO_CC}
  COMMENT "Recording the git commit"
  VERBATIM)
