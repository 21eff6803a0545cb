# Finds TensorPipe.
#
# Debian's libtensorpipe-dev ships only an exported targets file
# (/usr/share/cmake/Tensorpipe/TensorpipeTargets.cmake) and no package config,
# so find_package(Tensorpipe) needs this module. The PyTorch wheel used by the
# GPU build ships TensorPipe inside libtorch (share/cmake/Tensorpipe); both end
# up as the imported target `Tensorpipe::tensorpipe`.
#
# Installed with the SDK (cmake/RpcjobInstall.cmake) for find_package(rpcjob).
#
# Result: Tensorpipe_FOUND, Tensorpipe::tensorpipe, Tensorpipe_HAS_CUDA.

# Torch first: the GPU build's TensorPipe headers are in libtorch's include folder
# (find_package(rpcjob) finds Torch before this).
find_path(Tensorpipe_INCLUDE_DIR tensorpipe/tensorpipe.h HINTS ${TORCH_INCLUDE_DIRS})
find_file(Tensorpipe_TARGETS_FILE
  NAMES TensorpipeTargets.cmake
  PATH_SUFFIXES share/cmake/Tensorpipe lib/cmake/Tensorpipe
  PATHS /usr)

if(Tensorpipe_TARGETS_FILE AND NOT TARGET tensorpipe)
  include(${Tensorpipe_TARGETS_FILE})
endif()

set(Tensorpipe_HAS_CUDA OFF)
if(Tensorpipe_INCLUDE_DIR AND EXISTS "${Tensorpipe_INCLUDE_DIR}/tensorpipe/config_cuda.h")
  set(Tensorpipe_HAS_CUDA ON)
endif()

include(FindPackageHandleStandardArgs)
if(TARGET tensorpipe)
  find_package_handle_standard_args(Tensorpipe REQUIRED_VARS Tensorpipe_INCLUDE_DIR Tensorpipe_TARGETS_FILE)
else()
  # In the PyTorch wheel the symbols live in libtorch_cpu/libtorch_cuda; only headers are needed.
  find_package_handle_standard_args(Tensorpipe REQUIRED_VARS Tensorpipe_INCLUDE_DIR)
endif()

if(Tensorpipe_FOUND AND NOT TARGET Tensorpipe::tensorpipe)
  add_library(Tensorpipe::tensorpipe INTERFACE IMPORTED)
  set_target_properties(Tensorpipe::tensorpipe PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${Tensorpipe_INCLUDE_DIR}")
  if(TARGET tensorpipe)
    set_property(TARGET Tensorpipe::tensorpipe APPEND PROPERTY INTERFACE_LINK_LIBRARIES tensorpipe)
  endif()
endif()
mark_as_advanced(Tensorpipe_INCLUDE_DIR Tensorpipe_TARGETS_FILE)
