# A torch wheel built with CUDA needs no CUDA toolkit to build against.
#
# The wheel's CMake package (Caffe2Config.cmake -> public/cuda.cmake) looks for
# nvcc, enables the CUDA language and calls find_package(CUDAToolkit), only to
# define one target its own targets link to: torch::cudart (c10_cuda and
# torch_cuda name it). This project compiles no CUDA code, and the wheel's
# dependencies (nvidia-cuda-runtime, nvidia-cublas, nvidia-nccl-cu*, ...)
# already bring the CUDA runtime and every header LibTorch's CUDA headers
# include, under site-packages/nvidia/*/{include,lib}. When no nvcc is found,
# torch::cudart is defined here from them before find_package(Torch);
# cuda.cmake then returns at its include guard (`if(TARGET torch::cudart)`).
# The CUDA code path (cuda_support.cc) still compiles, and the binary runs on a
# GPU machine as well as on the CPU.
#
# LTB_CUDA_FROM_WHEEL: AUTO (when no nvcc is found, or when the nvcc found is
# of another CUDA major version than the wheel's: a toolkit's libcudart.so.12
# beside the wheel's libcudart.so.13 would load two CUDA runtimes in one
# process), ON, OFF (the toolkit, whatever its version).
# LTB_CUDA_BUILD_NOTE says which CUDA was used and why (the configuration
# prints it; bench's context reports it as `cuda_build`).
# LTB_CUDA_CRT_INCLUDE: an include directory holding crt/host_config.h where
# the wheel's site-packages has none (tools/setup --offline points it at the
# nvidia-cuda-crt that tools/offline-kit unpacked into the kit).
# LTB_CUDA=OFF builds a CPU-only bench from a LibTorch with CUDA. Otherwise a
# LibTorch with CUDA whose CUDA code cannot be built here (no toolkit, no
# CUDA headers beside the wheel) stops the configuration, saying what to
# install: a bench that quietly left CUDA out would tell a GPU machine that
# its LibTorch has none. Sets LTB_CUDA_FROM_WHEEL_USED, and
# LTB_TORCH_CUDA_UNUSABLE when the CUDA code is left out.
set(LTB_CUDA_FROM_WHEEL AUTO CACHE STRING
    "Take the CUDA runtime and headers from the torch wheel's nvidia packages instead of a CUDA toolkit: AUTO (when no nvcc is found or its CUDA major differs from the wheel's), ON or OFF")
set_property(CACHE LTB_CUDA_FROM_WHEEL PROPERTY STRINGS AUTO ON OFF)
set(LTB_CUDA_CRT_INCLUDE "" CACHE PATH
    "Include directory with crt/host_config.h (nvidia-cuda-crt) for a wheel that lacks it")
option(LTB_CUDA "Build the CUDA code when LibTorch has CUDA (OFF: a CPU-only bench)" ON)
set(LTB_CUDA_FROM_WHEEL_USED OFF)
set(LTB_TORCH_CUDA_UNUSABLE OFF)
set(LTB_CUDA_BUILD_NOTE "")
set(LTB_CUDA_TOOLKIT_NOTE "")
set(LTB_WHEEL_CUDA_VERSION "")

# The CUDA version an nvcc reports ("release 12.4, V12.4.131"), or "".
function(_ltb_nvcc_version nvcc out)
  execute_process(COMMAND "${nvcc}" --version OUTPUT_VARIABLE text
                  ERROR_QUIET RESULT_VARIABLE rc)
  set(version "")
  if(rc EQUAL 0 AND text MATCHES "release ([0-9]+\\.[0-9]+)")
    set(version "${CMAKE_MATCH_1}")
  endif()
  set(${out} "${version}" PARENT_SCOPE)
endfunction()

# The CUDA version a torch wheel was built with (torch/version.py), or "".
function(_ltb_wheel_cuda_version torch_dir out)
  set(version "")
  if(EXISTS "${torch_dir}/version.py")
    file(STRINGS "${torch_dir}/version.py" line REGEX "^cuda[^=]*= *'[0-9]")
    if(line MATCHES "'([0-9]+\\.[0-9]+)")
      set(version "${CMAKE_MATCH_1}")
    endif()
  endif()
  set(${out} "${version}" PARENT_SCOPE)
endfunction()

function(_ltb_find_torch_config out)
  set(candidates ${Torch_DIR} $ENV{Torch_DIR} ${CMAKE_PREFIX_PATH})
  string(REPLACE ":" ";" env_prefixes "$ENV{CMAKE_PREFIX_PATH}")
  list(APPEND candidates ${env_prefixes})
  foreach(dir IN LISTS candidates)
    foreach(sub "" "Torch" "share/cmake/Torch" "lib/cmake/Torch")
      if(EXISTS "${dir}/${sub}/TorchConfig.cmake")
        get_filename_component(found "${dir}/${sub}" ABSOLUTE)
        set(${out} "${found}" PARENT_SCOPE)
        return()
      endif()
    endforeach()
  endforeach()
  set(${out} "" PARENT_SCOPE)
endfunction()

function(_ltb_cuda_from_wheel)
  if(TARGET torch::cudart)
    return()
  endif()
  if(NOT LTB_CUDA)
    # The wheel's cuda.cmake must not look for a toolkit either.
    add_library(torch::cudart INTERFACE IMPORTED)
    set(LTB_TORCH_CUDA_UNUSABLE ON PARENT_SCOPE)
    message(STATUS "libtorch-bench: LTB_CUDA=OFF: building without the CUDA code, "
                   "as asked; bench runs on the CPU")
    return()
  endif()
  _ltb_find_torch_config(config_dir)
  if(NOT config_dir)
    return()
  endif()
  get_filename_component(prefix "${config_dir}/../../.." ABSOLUTE)
  set(targets "${prefix}/share/cmake/Caffe2/Caffe2Targets.cmake")
  if(NOT EXISTS "${targets}")
    return()
  endif()
  file(STRINGS "${targets}" uses_cudart REGEX "torch::cudart")
  if(NOT uses_cudart)
    return()  # a LibTorch without CUDA
  endif()
  _ltb_wheel_cuda_version("${prefix}" wheel_version)
  string(REGEX REPLACE "\\..*" "" wheel_major "${wheel_version}")
  set(LTB_WHEEL_CUDA_VERSION "${wheel_version}" PARENT_SCOPE)
  # What the wheel's cuda.cmake (FindCUDA, then enable_language(CUDA)) would
  # use: an explicit compiler, the toolkit's usual roots, or PATH.
  set(nvcc "")
  if(CMAKE_CUDA_COMPILER)
    set(nvcc "${CMAKE_CUDA_COMPILER}")
  elseif(DEFINED ENV{CUDACXX})
    set(nvcc "$ENV{CUDACXX}")
  elseif(CUDA_NVCC_EXECUTABLE)
    set(nvcc "${CUDA_NVCC_EXECUTABLE}")
  else()
    find_program(_ltb_nvcc nvcc NO_CACHE
      HINTS ${CUDAToolkit_ROOT} ${CUDA_TOOLKIT_ROOT_DIR} ENV CUDAToolkit_ROOT
            ENV CUDA_HOME ENV CUDA_PATH ENV CUDA_BIN_PATH
      PATHS /usr/local/cuda /opt/cuda
      PATH_SUFFIXES bin)
    if(_ltb_nvcc)
      set(nvcc "${_ltb_nvcc}")
    endif()
  endif()
  set(toolkit_version "")
  set(toolkit_major "")
  if(nvcc)
    _ltb_nvcc_version("${nvcc}" toolkit_version)
    string(REGEX REPLACE "\\..*" "" toolkit_major "${toolkit_version}")
  endif()
  set(other_major OFF)
  if(toolkit_major AND wheel_major AND NOT toolkit_major STREQUAL wheel_major)
    set(other_major ON)
    string(CONCAT toolkit_note "the CUDA toolkit ${toolkit_version} (${nvcc}) is CUDA "
                  "${toolkit_major}, LibTorch's is CUDA ${wheel_version}")
    set(LTB_CUDA_TOOLKIT_NOTE "${toolkit_note}" PARENT_SCOPE)
  endif()
  if(LTB_CUDA_FROM_WHEEL STREQUAL "OFF")
    if(other_major)
      message(WARNING "libtorch-bench: ${toolkit_note}: with LTB_CUDA_FROM_WHEEL=OFF "
        "bench links the toolkit's CUDA runtime beside LibTorch's, two CUDA "
        "runtimes in one process. Leave LTB_CUDA_FROM_WHEEL at AUTO to build "
        "against the wheel's CUDA, or use a CUDA ${wheel_major} toolkit.")
    endif()
    return()
  endif()
  if(LTB_CUDA_FROM_WHEEL STREQUAL "AUTO" AND nvcc AND NOT other_major)
    # The toolkit, of LibTorch's CUDA major (or of a version unknown): the
    # very nvcc inspected, whatever order CMake's own search would take.
    if(NOT CMAKE_CUDA_COMPILER)
      set(CMAKE_CUDA_COMPILER "${nvcc}" CACHE FILEPATH "CUDA compiler" FORCE)
    endif()
    return()
  endif()
  if(LTB_CUDA_FROM_WHEEL STREQUAL "ON")
    set(why "LTB_CUDA_FROM_WHEEL=ON")
  elseif(other_major)
    set(why "${toolkit_note}: one CUDA runtime per process")
  else()
    set(why "no CUDA toolkit (nvcc)")
  endif()
  get_filename_component(site "${prefix}/.." ABSOLUTE)
  # cuda_runtime.h includes crt/host_config.h, which CUDA 13 moved to
  # nvidia-cuda-crt (tools/setup installs it; tools/offline-kit carries it).
  file(GLOB headers "${site}/nvidia/*/include/crt/host_config.h")
  file(GLOB cudart "${site}/nvidia/*/lib/libcudart.so.[0-9]*")
  file(GLOB include_dirs LIST_DIRECTORIES true "${site}/nvidia/*/include")
  set(crt_from "the torch wheel's site-packages")
  if(NOT headers AND LTB_CUDA_CRT_INCLUDE AND EXISTS "${LTB_CUDA_CRT_INCLUDE}/crt/host_config.h")
    set(headers "${LTB_CUDA_CRT_INCLUDE}/crt/host_config.h")
    list(APPEND include_dirs "${LTB_CUDA_CRT_INCLUDE}")
    set(crt_from "${LTB_CUDA_CRT_INCLUDE}")
  endif()
  add_library(torch::cudart INTERFACE IMPORTED)
  if(headers AND cudart)
    list(GET cudart 0 cudart)
    set_target_properties(torch::cudart PROPERTIES
      INTERFACE_INCLUDE_DIRECTORIES "${include_dirs}"
      INTERFACE_LINK_LIBRARIES "${cudart}")
    set(LTB_CUDA_FROM_WHEEL_USED ON PARENT_SCOPE)
    set(LTB_CUDA_BUILD_NOTE
        "the torch wheel's CUDA ${wheel_version} runtime and headers (${why})" PARENT_SCOPE)
    message(STATUS "libtorch-bench: ${why}; CUDA runtime and headers from the "
                   "torch wheel (CUDA ${wheel_version}): ${cudart}; crt/ headers from ${crt_from}")
  else()
    set(runtime "the version of the wheel's nvidia-cuda-runtime")
    file(GLOB dist_info "${site}/nvidia_cuda_runtime*-*.dist-info")
    if(dist_info)
      list(GET dist_info 0 dist_info)
      string(REGEX REPLACE ".*-([0-9][0-9.]*)\\.dist-info$" "\\1" runtime "${dist_info}")
    endif()
    if(other_major)
      message(FATAL_ERROR "libtorch-bench: LibTorch at ${prefix} has CUDA "
        "${wheel_version}, but ${toolkit_note}, and building against it would load "
        "two CUDA runtimes in one process; the wheel's own CUDA headers are "
        "incomplete (no crt/host_config.h). Install nvidia-cuda-crt==${runtime} "
        "(tools/setup does), or a CUDA ${wheel_major} toolkit, or configure with "
        "-DLTB_CUDA_FROM_WHEEL=OFF to use this toolkit anyway, or -DLTB_CUDA=OFF "
        "for a bench that runs on the CPU only.")
    endif()
    message(FATAL_ERROR "libtorch-bench: LibTorch at ${prefix} has CUDA, but its "
      "CUDA code cannot be built here: there is no CUDA toolkit (nvcc) and no "
      "crt/host_config.h beside the wheel; install nvidia-cuda-crt==${runtime} "
      "(tools/setup does; offline, tools/offline-kit carries it and tools/setup "
      "--offline uses it) or the CUDA toolkit, or configure with -DLTB_CUDA=OFF "
      "for a bench that runs on the CPU only.")
  endif()
endfunction()

_ltb_cuda_from_wheel()
