# Build settings shared by the targets (included from the top CMakeLists.txt).
#
# One precompiled header. Parsing nlohmann/json and spdlog (with fmt) is most
# of the compile time of a translation unit here, so every C++ target outside
# src/pg reuses one header precompiled once (extsvc_pch, cmake/pch.hpp)
# instead of parsing them per file or precompiling them per target. A PCH is
# only valid for compilations with the same predefined macros and code model,
# so its users get the same compile definitions (nlohmann and spdlog's, by
# linking extsvc_pch_deps) and the same -fPIC; -Winvalid-pch (an error with
# EXTSVC_WERROR) stops a build whose flags would silently bypass it.
#
# What is not shipped (dpfsim, the tests, the benchmark tools) builds with
# EXTSVC_TEST_FLAGS instead of the build type's optimisation and debug
# flags: the flags that made the whole test command fastest when measured
# (compile time against run time; docs/performance.md, "Build").
option(EXTSVC_PCH "Precompile nlohmann/json and spdlog once for all targets" ON)
# Fewer, larger translation units (CMake's unity build) for the libraries that
# ship (core, kube, reconcile, controller): EXTSVC_UNITY_BATCH sources per
# unit, 0 = off. Each unit instantiates nlohmann/json's templates once for
# its sources instead of once per file: src/core compiled in 24 s instead of
# 49 s (-j2, one run; docs/performance.md, "Build and test time"). Names in
# anonymous namespaces must therefore be unique within a library.
set(EXTSVC_UNITY_BATCH 8 CACHE STRING "Sources per unity translation unit of a shipped library (0: none)")
# The same for dpfsim and the tests (not shipped): EXTSVC_TEST_UNITY_BATCH.
# A name two test files both need lives in a header (sim/tests/sim_paths.h),
# not in each file's anonymous namespace; a file whose names still clash is
# kept out of the units (SKIP_UNITY_BUILD_INCLUSION), and so are the fuzz
# targets (one file per target).
set(EXTSVC_TEST_UNITY_BATCH 8 CACHE STRING "Sources per unity translation unit of dpfsim and the tests (0: none)")
set(EXTSVC_TEST_FLAGS "-O1 -g0" CACHE STRING
    "Optimisation and debug flags of dpfsim, the tests and the benchmark tools (not shipped)")
separate_arguments(_extsvc_test_flags UNIX_COMMAND "${EXTSVC_TEST_FLAGS}")
# In a sanitizer build the libraries under test keep the build type's flags
# and what is not shipped gets EXTSVC_SANITIZE_TEST_FLAGS (empty: the build
# type's too). scripts/lib/sanitize-build.sh passes -O0: the client tests
# compile in less than half the time (23 against 54 CPU-seconds) and run as
# fast, as they mostly wait for sockets. A target whose own code is the work
# sets EXTSVC_SANITIZE_OPTIMISED and keeps the build type's flags: the unit
# tests (their property tests took 92 s under ASan at -O0 against 20 s) and
# the fuzz targets (executions per second).
set(EXTSVC_SANITIZE_TEST_FLAGS "" CACHE STRING
    "Optimisation flags of the tests and fuzz targets in a sanitizer build (empty: the build type's)")
if(EXTSVC_SANITIZE)
  separate_arguments(_extsvc_test_flags UNIX_COMMAND "${EXTSVC_SANITIZE_TEST_FLAGS}")
endif()

add_library(extsvc_pch_deps INTERFACE)
target_link_libraries(extsvc_pch_deps INTERFACE nlohmann_json::nlohmann_json spdlog::spdlog)

if(EXTSVC_PCH)
  add_library(extsvc_pch OBJECT ${CMAKE_SOURCE_DIR}/cmake/pch.cpp)
  target_link_libraries(extsvc_pch PRIVATE extsvc_pch_deps)
  target_precompile_headers(extsvc_pch PRIVATE ${CMAKE_SOURCE_DIR}/cmake/pch.hpp)
  # -O0 leaves __OPTIMIZE__ undefined: such a test build needs a PCH of its own.
  if(_extsvc_test_flags MATCHES "-O0")
    add_library(extsvc_pch_test OBJECT ${CMAKE_SOURCE_DIR}/cmake/pch.cpp)
    target_link_libraries(extsvc_pch_test PRIVATE extsvc_pch_deps)
    target_compile_options(extsvc_pch_test PRIVATE ${_extsvc_test_flags})
    target_precompile_headers(extsvc_pch_test PRIVATE ${CMAKE_SOURCE_DIR}/cmake/pch.hpp)
  endif()
endif()

# extsvc_use_pch(TARGET): TARGET's sources start with cmake/pch.hpp, compiled once.
function(extsvc_use_pch t)
  target_link_libraries(${t} PRIVATE extsvc_pch_deps)
  get_target_property(not_shipped ${t} EXTSVC_NOT_SHIPPED)
  if(EXTSVC_UNITY_BATCH GREATER 0 AND NOT not_shipped)
    set_target_properties(${t} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE ${EXTSVC_UNITY_BATCH})
  elseif(EXTSVC_TEST_UNITY_BATCH GREATER 0 AND not_shipped)
    set_target_properties(${t} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE ${EXTSVC_TEST_UNITY_BATCH})
    # a GoogleTest fixture in an anonymous namespace is an error in a unity
    # unit (GCC takes the file for a header), not in a file of its own
    target_compile_options(${t} PRIVATE $<$<CXX_COMPILER_ID:GNU>:-Wno-subobject-linkage>)
  endif()
  get_target_property(type ${t} TYPE)
  if(type STREQUAL "EXECUTABLE")
    # an executable's sources would be -fPIE: the precompiled header is -fPIC
    set_target_properties(${t} PROPERTIES POSITION_INDEPENDENT_CODE OFF)
    target_compile_options(${t} PRIVATE -fPIC)
  endif()
  if(NOT EXTSVC_PCH)
    return()
  endif()
  get_target_property(test_pch ${t} EXTSVC_NOT_SHIPPED_PCH)
  if(test_pch AND TARGET extsvc_pch_test)
    target_precompile_headers(${t} REUSE_FROM extsvc_pch_test)
  else()
    target_precompile_headers(${t} REUSE_FROM extsvc_pch)
  endif()
  target_compile_options(${t} PRIVATE -Winvalid-pch)
endfunction()

# extsvc_not_shipped(TARGET...): dpfsim, tests and benchmark tools get
# EXTSVC_TEST_FLAGS and the precompiled header.
function(extsvc_not_shipped)
  foreach(t ${ARGN})
    set_target_properties(${t} PROPERTIES EXTSVC_NOT_SHIPPED ON)
    get_target_property(optimised ${t} EXTSVC_SANITIZE_OPTIMISED)
    if(EXTSVC_SANITIZE AND optimised)
      set_target_properties(${t} PROPERTIES EXTSVC_NOT_SHIPPED_PCH OFF)
    else()
      target_compile_options(${t} PRIVATE ${_extsvc_test_flags})
      set_target_properties(${t} PROPERTIES EXTSVC_NOT_SHIPPED_PCH ON)
    endif()
    extsvc_use_pch(${t})
  endforeach()
endfunction()
