# How each dependency is found: the system package first, then (when the
# machine is online) a pinned FetchContent fallback. LibTorch is always found
# with find_package(Torch), so CMAKE_PREFIX_PATH or Torch_DIR choose which.
# LTB_FETCH=OFF (tools/setup --offline) fetches nothing: a dependency that is
# not found stops the configuration instead.
option(LTB_FETCH "Fetch a dependency that is not installed (FetchContent)" ON)
if(NOT LTB_FETCH)
  set(FETCHCONTENT_FULLY_DISCONNECTED ON)
endif()
include(FetchContent)
# Where third_party/build-deps (run by tools/setup) puts the dependencies the
# suite builds itself: Google Benchmark in Release and MLPerf LoadGen, each
# in its own prefix. tools/setup --offline points it into the kit.
if(NOT "$ENV{XDG_CACHE_HOME}" STREQUAL "")
  set(_ltb_cache "$ENV{XDG_CACHE_HOME}/libtorch-bench")
else()
  set(_ltb_cache "$ENV{HOME}/.cache/libtorch-bench")
endif()
set(LTB_DEPS_DIR "${_ltb_cache}/deps" CACHE PATH
    "Prefixes of the dependencies third_party/build-deps builds (benchmark/, loadgen/)")
function(ltb_fetch_or_fail name)
  if(NOT LTB_FETCH)
    message(FATAL_ERROR "libtorch-bench: ${name} not found, and LTB_FETCH is OFF "
      "(offline): install it, or put it in CMAKE_PREFIX_PATH "
      "(tools/offline-kit prepares a directory with every dependency).")
  endif()
endfunction()

# --- LibTorch ---------------------------------------------------------------
# The wheel's Caffe2 config asks for CUDA architectures only to compile .cu
# files, which this project has none of; a fixed list keeps it from probing.
if(NOT DEFINED TORCH_CUDA_ARCH_LIST AND NOT DEFINED ENV{TORCH_CUDA_ARCH_LIST})
  set(TORCH_CUDA_ARCH_LIST "8.0;9.0" CACHE STRING "CUDA architectures")
endif()
# Without a CUDA toolkit, the wheel's own CUDA runtime and headers stand in.
include(WheelCuda)
find_package(Torch REQUIRED)
# lib/base/torch_compat.h bridges the APIs that changed since 1.13
# (Debian 12's libtorch-dev); older versions are not supported.
set(LTB_MIN_TORCH 1.13)
if(Torch_VERSION AND Torch_VERSION VERSION_LESS LTB_MIN_TORCH)
  message(FATAL_ERROR "libtorch-bench needs LibTorch ${LTB_MIN_TORCH} or newer; "
    "found ${Torch_VERSION} at ${TORCH_INSTALL_PREFIX}. Point CMAKE_PREFIX_PATH "
    "or Torch_DIR at a newer one, or let tools/setup provide the torch wheel's.")
endif()
set(LTB_TORCH_HAS_CUDA OFF)
if((TARGET torch_cuda OR CAFFE2_USE_CUDA) AND NOT LTB_TORCH_CUDA_UNUSABLE)
  set(LTB_TORCH_HAS_CUDA ON)
endif()
message(STATUS "libtorch-bench: LibTorch ${Torch_VERSION} at ${TORCH_INSTALL_PREFIX} (CUDA: ${CAFFE2_USE_CUDA})")
# Which CUDA the CUDA code was built against (bench's context: cuda_build).
if(LTB_TORCH_CUDA_UNUSABLE)
  set(LTB_CUDA_BUILD_NOTE "none (LTB_CUDA=OFF: the CUDA code is left out)")
elseif(LTB_TORCH_HAS_CUDA AND NOT LTB_CUDA_FROM_WHEEL_USED)
  set(_ltb_toolkit "${CUDAToolkit_NVCC_EXECUTABLE}")
  if(NOT _ltb_toolkit)
    set(_ltb_toolkit "${CUDAToolkit_BIN_DIR}")
  endif()
  set(LTB_CUDA_BUILD_NOTE "the CUDA toolkit ${CUDAToolkit_VERSION} (${_ltb_toolkit})")
  # The toolkit CMake found must be of LibTorch's CUDA major too (one CUDA
  # runtime per process), whichever way it was found.
  string(REGEX REPLACE "\\..*" "" _ltb_wheel_major "${LTB_WHEEL_CUDA_VERSION}")
  if(_ltb_wheel_major AND CUDAToolkit_VERSION_MAJOR AND
     NOT CUDAToolkit_VERSION_MAJOR STREQUAL _ltb_wheel_major AND
     NOT LTB_CUDA_FROM_WHEEL STREQUAL "OFF")
    message(FATAL_ERROR "libtorch-bench: CMake found the CUDA toolkit "
      "${CUDAToolkit_VERSION} (${_ltb_toolkit}), but LibTorch is built with CUDA "
      "${LTB_WHEEL_CUDA_VERSION}: two CUDA runtimes would load in one process. Point "
      "CUDAToolkit_ROOT (or CMAKE_CUDA_COMPILER) at a CUDA ${_ltb_wheel_major} toolkit, "
      "or configure with -DLTB_CUDA_FROM_WHEEL=ON to build against the wheel's CUDA.")
  endif()
  if(LTB_CUDA_TOOLKIT_NOTE)
    string(APPEND LTB_CUDA_BUILD_NOTE ": LTB_CUDA_FROM_WHEEL=OFF, although "
           "${LTB_CUDA_TOOLKIT_NOTE} (two CUDA runtimes in one process)")
  endif()
endif()
if(LTB_CUDA_BUILD_NOTE)
  message(STATUS "libtorch-bench: CUDA code built against ${LTB_CUDA_BUILD_NOTE}")
endif()

add_library(ltb_torch INTERFACE)
target_link_libraries(ltb_torch INTERFACE ${TORCH_LIBRARIES})
if(TORCH_CXX_FLAGS)
  separate_arguments(_ltb_torch_flags UNIX_COMMAND "${TORCH_CXX_FLAGS}")
  target_compile_options(ltb_torch INTERFACE ${_ltb_torch_flags})
endif()
# The PyPI wheel keeps CUDA, cuDNN and NCCL in site-packages/nvidia/*/lib,
# newer than (and preferred over) a system CUDA toolkit: link against them
# and look there first at run time.
get_filename_component(_ltb_site "${TORCH_INSTALL_PREFIX}/.." ABSOLUTE)
file(GLOB _ltb_wheel_libs LIST_DIRECTORIES true "${_ltb_site}/nvidia/*/lib")
if(_ltb_wheel_libs)
  foreach(dir IN LISTS _ltb_wheel_libs)
    target_link_options(ltb_torch INTERFACE "LINKER:-rpath-link,${dir}")
  endforeach()
  list(PREPEND CMAKE_BUILD_RPATH ${_ltb_wheel_libs} "${TORCH_INSTALL_PREFIX}/lib")
endif()
# LibTorch's NCCL process group (ProcessGroupNCCL.hpp) is built against the
# NCCL its wheel ships (nvidia/nccl), and inline code of the header lays out
# ncclConfig_t as that nccl.h does. Another nccl.h (the CUDA toolkit's may be
# older, with a smaller ncclConfig_t) would build the group's options with
# the wrong layout: the wheel's include directory goes first, and CMake says
# which header the build uses.
set(LTB_NCCL_INCLUDE_DIR "")
if(EXISTS "${_ltb_site}/nvidia/nccl/include/nccl.h")
  set(LTB_NCCL_INCLUDE_DIR "${_ltb_site}/nvidia/nccl/include")
  set(_ltb_nccl_h "${LTB_NCCL_INCLUDE_DIR}/nccl.h")
  set(_ltb_nccl_whose "LibTorch's own")
elseif(CAFFE2_USE_CUDA)
  find_file(_ltb_nccl_h nccl.h PATHS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include
            NO_CACHE)
  set(_ltb_nccl_whose "not LibTorch's: this LibTorch ships no nvidia/nccl")
endif()
if(_ltb_nccl_h)
  file(STRINGS "${_ltb_nccl_h}" _ltb_nccl_v REGEX "^#define NCCL_(MAJOR|MINOR|PATCH) ")
  string(REGEX REPLACE "[^;]*NCCL_[A-Z]+ +([0-9]+)" "\\1" _ltb_nccl_v "${_ltb_nccl_v}")
  string(REPLACE ";" "." _ltb_nccl_v "${_ltb_nccl_v}")
  message(STATUS "libtorch-bench: nccl.h ${_ltb_nccl_v} at ${_ltb_nccl_h} (${_ltb_nccl_whose})")
endif()
# LibTorch's Gloo process group header includes <gloo/...>, which the wheel
# does not ship (libgloo-dev does); outside the system include directories
# (an offline kit), add its directory.
find_path(LTB_GLOO_INCLUDE_DIR gloo/algorithm.h)
if(LTB_GLOO_INCLUDE_DIR AND NOT LTB_GLOO_INCLUDE_DIR IN_LIST CMAKE_CXX_IMPLICIT_INCLUDE_DIRECTORIES)
  target_include_directories(ltb_torch SYSTEM INTERFACE "${LTB_GLOO_INCLUDE_DIR}")
endif()
add_library(ltb::torch ALIAS ltb_torch)

# --- zlib (shard checksums) ---
find_package(ZLIB REQUIRED)

# --- OpenSSL's libcrypto (the SHA-256 of a --weights checkpoint) ---
find_package(OpenSSL REQUIRED COMPONENTS Crypto)

# --- nlohmann/json (JSON text the suite writes or reads) ---------------------
find_package(nlohmann_json 3.10 CONFIG QUIET)
if(NOT nlohmann_json_FOUND)
  ltb_fetch_or_fail(nlohmann-json)
  message(STATUS "libtorch-bench: no system nlohmann-json, fetching v3.11.2")
  set(JSON_Install OFF)
  FetchContent_Declare(nlohmann_json
    GIT_REPOSITORY https://github.com/nlohmann/json.git
    GIT_TAG v3.11.2 GIT_SHALLOW TRUE)
  FetchContent_MakeAvailable(nlohmann_json)
endif()

# --- Abseil -----------------------------------------------------------------
find_package(absl CONFIG QUIET)
if(NOT absl_FOUND)
  ltb_fetch_or_fail(Abseil)
  message(STATUS "libtorch-bench: no system Abseil, fetching 20220623.1")
  set(ABSL_PROPAGATE_CXX_STD ON)
  set(ABSL_ENABLE_INSTALL OFF)
  FetchContent_Declare(absl
    GIT_REPOSITORY https://github.com/abseil/abseil-cpp.git
    GIT_TAG 20220623.1 GIT_SHALLOW TRUE)
  FetchContent_MakeAvailable(absl)
endif()

# --- Google Benchmark -------------------------------------------------------
# Debian's libbenchmark is compiled without NDEBUG: it prints "Library was
# built as DEBUG" on every run and the context says library_build_type
# "debug". The Release build of the same version in LTB_DEPS_DIR comes first;
# a Google Benchmark found earlier (benchmark_DIR in the cache) is forgotten.
set(_ltb_release_benchmark "${LTB_DEPS_DIR}/benchmark")
if(EXISTS "${_ltb_release_benchmark}/lib/cmake/benchmark/benchmarkConfig.cmake")
  string(FIND "${benchmark_DIR}/" "${_ltb_release_benchmark}/" _ltb_at)
  if(NOT _ltb_at EQUAL 0)
    unset(benchmark_DIR CACHE)
  endif()
  find_package(benchmark CONFIG REQUIRED PATHS "${_ltb_release_benchmark}" NO_DEFAULT_PATH)
  message(STATUS "libtorch-bench: Google Benchmark ${benchmark_VERSION}, Release, "
                 "at ${_ltb_release_benchmark}")
else()
  find_package(benchmark CONFIG QUIET)
  if(benchmark_FOUND)
    message(STATUS "libtorch-bench: Google Benchmark ${benchmark_VERSION} at ${benchmark_DIR}; "
      "no Release build in ${_ltb_release_benchmark} (third_party/build-deps makes "
      "one): a Debian library says library_build_type \"debug\"")
  endif()
endif()
if(NOT benchmark_FOUND)
  ltb_fetch_or_fail("Google Benchmark")
  message(STATUS "libtorch-bench: no system Google Benchmark, fetching v1.7.1")
  set(BENCHMARK_ENABLE_TESTING OFF)
  set(BENCHMARK_ENABLE_INSTALL OFF)
  FetchContent_Declare(benchmark
    GIT_REPOSITORY https://github.com/google/benchmark.git
    GIT_TAG v1.7.1 GIT_SHALLOW TRUE)
  FetchContent_MakeAvailable(benchmark)
endif()

# --- MLPerf LoadGen ---------------------------------------------------------
# Pinned in third_party/loadgen/pin.txt (version, url, sha256); built by
# third_party/build-deps into LTB_DEPS_DIR/loadgen, else (online) fetched and
# built here the same way.
file(STRINGS "${PROJECT_SOURCE_DIR}/third_party/loadgen/pin.txt" _ltb_pin REGEX "^[a-z0-9]+=")
foreach(_ltb_line IN LISTS _ltb_pin)
  string(REGEX MATCH "^([a-z0-9]+)=(.*)$" _ltb_match "${_ltb_line}")
  string(TOUPPER "${CMAKE_MATCH_1}" _ltb_key)
  set(LTB_LOADGEN_${_ltb_key} "${CMAKE_MATCH_2}")
endforeach()
# LoadGen's Python bindings (tools/requirements.txt) are the same version.
file(STRINGS "${PROJECT_SOURCE_DIR}/tools/requirements.txt" _ltb_wheel REGEX "^mlcommons-loadgen==")
if(NOT _ltb_wheel STREQUAL "mlcommons-loadgen==${LTB_LOADGEN_VERSION}")
  message(FATAL_ERROR "libtorch-bench: tools/requirements.txt pins \"${_ltb_wheel}\", but "
    "third_party/loadgen/pin.txt builds LoadGen ${LTB_LOADGEN_VERSION}: pin one version in both.")
endif()
find_package(loadgen ${LTB_LOADGEN_VERSION} EXACT CONFIG QUIET
             PATHS "${LTB_DEPS_DIR}/loadgen" NO_DEFAULT_PATH)
if(loadgen_FOUND)
  message(STATUS "libtorch-bench: MLPerf LoadGen ${loadgen_VERSION} at ${LTB_DEPS_DIR}/loadgen")
else()
  ltb_fetch_or_fail("MLPerf LoadGen ${LTB_LOADGEN_VERSION} (in ${LTB_DEPS_DIR}/loadgen)")
  message(STATUS "libtorch-bench: no LoadGen ${LTB_LOADGEN_VERSION} in ${LTB_DEPS_DIR}, "
                 "fetching mlcommons-loadgen ${LTB_LOADGEN_VERSION}'s source package")
  # The source package has no CMakeLists.txt: it is only unpacked, and
  # third_party/loadgen builds it.
  FetchContent_Declare(ltb_loadgen_sdist
    URL "${LTB_LOADGEN_URL}" URL_HASH SHA256=${LTB_LOADGEN_SHA256}
    DOWNLOAD_EXTRACT_TIMESTAMP TRUE)
  FetchContent_MakeAvailable(ltb_loadgen_sdist)
  set(LOADGEN_SOURCE_DIR "${ltb_loadgen_sdist_SOURCE_DIR}" CACHE PATH
      "The unpacked mlcommons-loadgen source package" FORCE)
  add_subdirectory("${PROJECT_SOURCE_DIR}/third_party/loadgen"
                   "${CMAKE_BINARY_DIR}/_deps/loadgen-build" EXCLUDE_FROM_ALL)
endif()

# --- GoogleTest -------------------------------------------------------------
if(LTB_BUILD_TESTS)
  find_package(GTest CONFIG QUIET)
  if(NOT GTest_FOUND)
    find_package(GTest QUIET)
  endif()
  if(NOT GTest_FOUND)
    ltb_fetch_or_fail(GoogleTest)
    message(STATUS "libtorch-bench: no system GoogleTest, fetching v1.12.1")
    set(INSTALL_GTEST OFF)
    FetchContent_Declare(googletest
      GIT_REPOSITORY https://github.com/google/googletest.git
      GIT_TAG release-1.12.1 GIT_SHALLOW TRUE)
    FetchContent_MakeAvailable(googletest)
  endif()
endif()
