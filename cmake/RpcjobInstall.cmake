# The SDK: what `cmake --install` puts in place for users who write their own
# programs against the runtime (examples/hello/README.md), and the CMake package
# `find_package(rpcjob)` reads:
#
#   rpcjob::runtime     the RPC runtime (rpcjob/runtime/*.h); links libtorch
#   rpcjob::assignment  the worker table and the identity environment
#                       (rpcjob/assignment/*.h); rpcjob::runtime links it
#   rpcjob::version     rpcjob/version.h (RPCJOB_VERSION_STRING)
#   rpcjob::telemetry   rpcjob's metrics for the user's program (rpcjob/telemetry/exporter.h):
#                       /metrics and the final metrics file, as rpcjob-worker's
#
# plus, in a static build, the libraries those need at link time only
# (rpcjob::wire, rpcjob::cuda_kernels, rpcjob::metrics, rpcjob::instrument):
# never link those by name. Public headers are the include/ folders of the
# libraries reached through public links; private ones (worker/src) and those of
# link-time-only libraries are not installed. Installed here, not in worker/CMakeLists.txt and
# assignment/CMakeLists.txt, so that those stay about building.
#
# Layout under the prefix: include/rpcjob/{runtime,assignment}/, include/rpcjob/version.h,
# lib/librpcjob_*.{a,so}, lib/cmake/rpcjob/ (rpcjobConfig.cmake, its version file,
# rpcjobTargets*.cmake and FindTensorpipe.cmake for find_dependency).

# A shared build (BUILD_SHARED_LIBS=ON, the images') installs the project's shared
# libraries the installed programs load, SDK or not: without them an installed
# rpcjob-worker, rpcjob or rpcjob-operator would not start. Only the SDK's are
# exported (below).
foreach(lib rpcjob_api rpcjob_planner rpcjob_assignment rpcjob_metrics rpcjob_instrument
            rpcjob_operator_lib)
  if(TARGET ${lib})
    get_target_property(type ${lib} TYPE)
    if(type STREQUAL "SHARED_LIBRARY" AND NOT lib STREQUAL "rpcjob_assignment")
      install(TARGETS ${lib} LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
    endif()
  endif()
endforeach()

if(NOT TARGET rpcjob_runtime)
  if(TARGET rpcjob_assignment)
    get_target_property(type rpcjob_assignment TYPE)
    if(type STREQUAL "SHARED_LIBRARY")
      install(TARGETS rpcjob_assignment LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
    endif()
  endif()
  message(STATUS "rpcjob SDK not installed: the runtime is not built (RPCJOB_BUILD_WORKER=OFF)")
  return()
endif()

include(CMakePackageConfigHelpers)
set(RPCJOB_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/rpcjob)

# Install-tree include folders come from $<INSTALL_INTERFACE:include>; a plain
# source or build path on an exported target would name this machine's checkout,
# so such paths are kept for the build tree only.
function(rpcjob_build_only_includes target)
  get_target_property(dirs ${target} INTERFACE_INCLUDE_DIRECTORIES)
  if(NOT dirs)
    return()
  endif()
  set(fixed "")
  foreach(dir IN LISTS dirs)
    if(IS_ABSOLUTE "${dir}")
      list(APPEND fixed "$<BUILD_INTERFACE:${dir}>")
    else()
      list(APPEND fixed "${dir}")
    endif()
  endforeach()
  set_property(TARGET ${target} PROPERTY INTERFACE_INCLUDE_DIRECTORIES "${fixed}")
endfunction()

# libtorch as the user's find_package(Torch) has it, not this machine's: the
# runtime's interface names ${TORCH_LIBRARIES}, which holds absolute paths
# (libc10.so, the CUDA libraries) of this build's libtorch. Installed, that list
# becomes rpcjob::torch, which rpcjobConfig.cmake makes from the user's own
# TORCH_LIBRARIES after find_dependency(Torch).
function(rpcjob_install_torch_as_imported target)
  get_target_property(links ${target} INTERFACE_LINK_LIBRARIES)
  if(NOT links)
    return()
  endif()
  set(fixed "")
  set(torch_seen OFF)
  foreach(lib IN LISTS links)
    string(REGEX REPLACE "^\\$<LINK_ONLY:(.*)>$" "\\1" bare "${lib}")
    if(bare IN_LIST TORCH_LIBRARIES)
      list(APPEND fixed "$<BUILD_INTERFACE:${lib}>")
      if(NOT torch_seen)
        list(APPEND fixed "$<INSTALL_INTERFACE:rpcjob::torch>")
        set(torch_seen ON)
      endif()
    else()
      list(APPEND fixed "${lib}")
    endif()
  endforeach()
  set_property(TARGET ${target} PROPERTY INTERFACE_LINK_LIBRARIES "${fixed}")
endfunction()
rpcjob_install_torch_as_imported(rpcjob_runtime)

# The GPU build's rpcjob_instrument links libtorch too (PyTorch's TensorPipe is
# inside it): the same list, the same rpcjob::torch; and its -idirafter of this
# machine's extra TensorPipe headers is for building here only.
function(rpcjob_install_portable_interface target)
  if(NOT target STREQUAL "rpcjob_runtime")  # done above, before the walk reads it
    rpcjob_install_torch_as_imported(${target})
  endif()
  get_target_property(options ${target} INTERFACE_COMPILE_OPTIONS)
  if(options)
    set(fixed "")
    foreach(option IN LISTS options)
      if(option MATCHES "(^|[ :])/")
        list(APPEND fixed "$<BUILD_INTERFACE:${option}>")
      else()
        list(APPEND fixed "${option}")
      endif()
    endforeach()
    set_property(TARGET ${target} PROPERTY INTERFACE_COMPILE_OPTIONS "${fixed}")
  endif()
endfunction()

# What is exported: rpcjob_runtime, rpcjob_telemetry (where built), rpcjob_version,
# and every library of this project their link interfaces name, followed through
# those: public ones (rpcjob::assignment) and, for static libraries, the private
# static ones needed at link time ($<LINK_ONLY:rpcjob_wire>, rpcjob_metrics, the
# CUDA kernels). Found by walking the targets, so a library another part adds to
# the runtime is exported without editing this list. Each is exported as
# rpcjob::<name without the rpcjob_ prefix>. rpcjob_public: those reached through
# public links only, whose headers are installed.
set(rpcjob_exported rpcjob_version)
set(rpcjob_public rpcjob_version)
set(queue rpcjob_runtime)
if(TARGET rpcjob_telemetry)
  list(APPEND queue rpcjob_telemetry)
endif()
set(queue_public "")
foreach(root IN LISTS queue)
  list(APPEND queue_public ON)
endforeach()
while(queue)
  list(POP_FRONT queue target)
  list(POP_FRONT queue_public public)
  get_target_property(aliased ${target} ALIASED_TARGET)
  if(aliased)
    set(target ${aliased})
  endif()
  if(public AND NOT target IN_LIST rpcjob_public)
    list(APPEND rpcjob_public ${target})
  elseif(target IN_LIST rpcjob_exported)
    continue()
  endif()
  if(NOT target IN_LIST rpcjob_exported)
    list(APPEND rpcjob_exported ${target})
  endif()
  get_target_property(links ${target} INTERFACE_LINK_LIBRARIES)
  # A shared library's private shared ones are exported too (the package names
  # them as link dependencies): rpcjob_telemetry's rpcjob_metrics in the images.
  get_target_property(type ${target} TYPE)
  if(type STREQUAL "SHARED_LIBRARY")
    get_target_property(private ${target} LINK_LIBRARIES)
    foreach(lib IN LISTS private)
      if(TARGET "${lib}" AND NOT lib IN_LIST links)
        get_target_property(lib_type ${lib} TYPE)
        if(lib_type STREQUAL "SHARED_LIBRARY")
          list(APPEND links "$<LINK_ONLY:${lib}>")
        endif()
      endif()
    endforeach()
  endif()
  foreach(lib IN LISTS links)
    set(lib_public ${public})
    if(lib MATCHES "^\\$<LINK_ONLY:(.*)>$")
      set(lib ${CMAKE_MATCH_1})
      set(lib_public OFF)
    endif()
    if(lib MATCHES "^\\$<" OR NOT TARGET "${lib}")
      continue()
    endif()
    get_target_property(imported ${lib} IMPORTED)
    if(NOT imported)
      list(APPEND queue ${lib})
      list(APPEND queue_public ${lib_public})
    endif()
  endforeach()
endwhile()

# Public headers: each public library's include/ folder in this checkout (a
# library's private folder, like rpcjob_wire's worker/src, is not installed) and
# the generated rpcjob/version.h.
set(public_include_dirs "")
foreach(target IN LISTS rpcjob_exported)
  string(REGEX REPLACE "^rpcjob_" "" name ${target})
  set_target_properties(${target} PROPERTIES EXPORT_NAME ${name})
  rpcjob_install_portable_interface(${target})
  # A shared library linked only privately (rpcjob_metrics under a shared
  # rpcjob_telemetry) is exported so that the linker finds it; nothing links it
  # directly, so its own link interface (prometheus-cpp, TensorPipe) is not the
  # user's to find.
  get_target_property(type ${target} TYPE)
  if(type STREQUAL "SHARED_LIBRARY" AND NOT target IN_LIST rpcjob_public)
    foreach(property INTERFACE_LINK_LIBRARIES INTERFACE_COMPILE_OPTIONS
                     INTERFACE_COMPILE_DEFINITIONS)
      get_target_property(values ${target} ${property})
      if(values)
        set(fixed "")
        foreach(value IN LISTS values)
          list(APPEND fixed "$<BUILD_INTERFACE:${value}>")
        endforeach()
        set_property(TARGET ${target} PROPERTY ${property} "${fixed}")
      endif()
    endforeach()
  endif()
  get_target_property(dirs ${target} INTERFACE_INCLUDE_DIRECTORIES)
  if(NOT target IN_LIST rpcjob_public)
    set(dirs "")
  endif()
  foreach(dir IN LISTS dirs)
    string(REGEX REPLACE "^\\$<BUILD_INTERFACE:(.*)>$" "\\1" dir "${dir}")
    string(FIND "${dir}" "${PROJECT_SOURCE_DIR}/" at)
    if(at EQUAL 0 AND dir MATCHES "/include$")
      list(APPEND public_include_dirs "${dir}/")
    endif()
  endforeach()
  rpcjob_build_only_includes(${target})
endforeach()
list(REMOVE_DUPLICATES public_include_dirs)
get_target_property(RPCJOB_RUNTIME_TYPE rpcjob_runtime TYPE)
if(RPCJOB_RUNTIME_TYPE STREQUAL "STATIC_LIBRARY")
  set(RPCJOB_SDK_STATIC ON)
else()
  set(RPCJOB_SDK_STATIC OFF)
endif()

install(TARGETS ${rpcjob_exported} EXPORT rpcjobTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY ${public_include_dirs}
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} FILES_MATCHING PATTERN "*.h")
install(FILES ${PROJECT_BINARY_DIR}/generated/rpcjob/version.h
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/rpcjob)
install(EXPORT rpcjobTargets NAMESPACE rpcjob:: DESTINATION ${RPCJOB_CMAKE_DIR})

# What the package config finds again for the user (find_dependency): Torch, and
# TensorPipe, yaml-cpp, OpenSSL's libcrypto, prometheus-cpp (rpcjob::telemetry's) and
# CUDA only where static libraries need them at link time; the build's choices (static,
# CUDA, telemetry) are recorded, not its paths.
set(RPCJOB_SDK_WITH_CUDA ${RPCJOB_WITH_CUDA})
set(type "")
if(TARGET rpcjob_metrics)
  get_target_property(type rpcjob_metrics TYPE)
endif()
if(rpcjob_metrics IN_LIST rpcjob_exported AND type STREQUAL "STATIC_LIBRARY")
  set(RPCJOB_SDK_PROMETHEUS ON)
else()
  set(RPCJOB_SDK_PROMETHEUS OFF)
endif()
# Debian's TensorPipe is a library of its own; PyTorch's is inside libtorch.
if(TARGET tensorpipe)
  set(RPCJOB_SDK_TENSORPIPE_LIBRARY ON)
else()
  set(RPCJOB_SDK_TENSORPIPE_LIBRARY OFF)
endif()
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/rpcjobConfig.cmake.in
  ${PROJECT_BINARY_DIR}/generated/rpcjobConfig.cmake
  INSTALL_DESTINATION ${RPCJOB_CMAKE_DIR})
# 0.x: a minor version may break the API, so only the same minor is compatible.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/generated/rpcjobConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/generated/rpcjobConfig.cmake
  ${PROJECT_BINARY_DIR}/generated/rpcjobConfigVersion.cmake
  ${PROJECT_SOURCE_DIR}/cmake/FindTensorpipe.cmake
  DESTINATION ${RPCJOB_CMAKE_DIR})
