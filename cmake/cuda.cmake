# The CUDA backend plugin, lib/ddplua_cuda.so: kernels (src/backends/cuda/*.cu),
# cuBLAS GEMMs, the caching allocator and, when NCCL is found, the NCCL
# process group. Included from CMakeLists.txt when DDPLUA_CUDA is ON; without
# a toolkit it prints one line and builds nothing CUDA (the runtime then says
# why CUDA is unavailable when a script asks for it). Without NCCL the plugin
# is built without its NCCL group: CUDA tensors work, and backend="nccl" is
# refused with "the CUDA plugin was built without NCCL".
#
# NCCL is looked for, in this order, under $NCCL_HOME (or -DNCCL_HOME=), the
# nvidia/nccl folder of Python's site-packages (the nvidia-nccl-cu13 wheel
# that PyTorch installs: lib/libnccl.so.2 and include/nccl.h), the CUDA
# toolkit, and the system; libnccl.so.2 is accepted without a libnccl.so
# symlink. A library found without a header takes the header from
# $DDPLUA_NCCL_INCLUDE (tools/gpu_bundle.sh carries one).
option(DDPLUA_NCCL "Build the NCCL process group into the CUDA plugin when NCCL is found" ON)
include(CheckLanguage)
if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
  set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
endif()
check_language(CUDA)
if(NOT CMAKE_CUDA_COMPILER)
  message(STATUS "ddplua: no CUDA toolkit (nvcc) found: building without the CUDA backend")
  return()
endif()
# sm_90 machine code (H100/H200) plus PTX the driver can compile for newer GPUs
if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
  set(CMAKE_CUDA_ARCHITECTURES "90-real;90-virtual")
endif()
enable_language(CUDA)
set(CMAKE_CUDA_STANDARD 17)
set(CMAKE_CUDA_STANDARD_REQUIRED ON)
find_package(CUDAToolkit REQUIRED)

# ---- NCCL ----
set(DDPLUA_NCCL_ROOTS "")
if(NCCL_HOME)
  list(APPEND DDPLUA_NCCL_ROOTS ${NCCL_HOME})
endif()
if(DEFINED ENV{NCCL_HOME})
  list(APPEND DDPLUA_NCCL_ROOTS $ENV{NCCL_HOME})
endif()
# site-packages of the python3 on the PATH (a venv's own when it is active)
find_program(DDPLUA_PYTHON3 NAMES python3)
if(DDPLUA_PYTHON3 AND DDPLUA_NCCL)
  execute_process(
    COMMAND ${DDPLUA_PYTHON3} -c
            "import site, sysconfig; p = site.getsitepackages() + [sysconfig.get_paths()[k] for k in ('purelib', 'platlib')]; print(';'.join(p))"
    OUTPUT_VARIABLE DDPLUA_SITE_PACKAGES OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET TIMEOUT 20)
  foreach(sp ${DDPLUA_SITE_PACKAGES})
    if(EXISTS ${sp}/nvidia/nccl)
      list(APPEND DDPLUA_NCCL_ROOTS ${sp}/nvidia/nccl)
    endif()
  endforeach()
endif()
list(APPEND DDPLUA_NCCL_ROOTS ${CUDAToolkit_LIBRARY_ROOT} ${CUDAToolkit_TARGET_DIR})
list(REMOVE_DUPLICATES DDPLUA_NCCL_ROOTS)
# a cached NCCL that has gone (a temporary wheel, another venv) is looked for again
if(NCCL_LIBRARY AND NOT EXISTS "${NCCL_LIBRARY}")
  unset(NCCL_LIBRARY CACHE)
  unset(NCCL_INCLUDE_DIR CACHE)
endif()
if(DDPLUA_NCCL)
  find_library(NCCL_LIBRARY NAMES nccl libnccl.so.2 NAMES_PER_DIR HINTS ${DDPLUA_NCCL_ROOTS} ${CUDAToolkit_LIBRARY_DIR}
               PATH_SUFFIXES lib lib64)
  if(NCCL_LIBRARY)
    # the header next to the library first: it matches its version
    get_filename_component(NCCL_LIB_DIR ${NCCL_LIBRARY} DIRECTORY)
    find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${NCCL_LIB_DIR}/../include ${DDPLUA_NCCL_ROOTS} ${CUDAToolkit_INCLUDE_DIRS}
              $ENV{DDPLUA_NCCL_INCLUDE} PATH_SUFFIXES include)
  endif()
endif()
if(DDPLUA_NCCL AND NCCL_LIBRARY AND NCCL_INCLUDE_DIR)
  set(DDPLUA_HAVE_NCCL ON)
  message(STATUS "ddplua: CUDA backend for ${CMAKE_CUDA_ARCHITECTURES} with CUDA ${CUDAToolkit_VERSION}, "
                 "NCCL ${NCCL_LIBRARY} (header in ${NCCL_INCLUDE_DIR})")
else()
  set(DDPLUA_HAVE_NCCL OFF)
  if(NOT DDPLUA_NCCL)
    set(why "DDPLUA_NCCL=OFF")
  elseif(NOT NCCL_LIBRARY)
    set(why "no libnccl.so(.2) under ${DDPLUA_NCCL_ROOTS} or the system")
  else()
    set(why "${NCCL_LIBRARY} has no nccl.h beside it (set DDPLUA_NCCL_INCLUDE)")
  endif()
  message(STATUS "ddplua: CUDA backend for ${CMAKE_CUDA_ARCHITECTURES} with CUDA ${CUDAToolkit_VERSION}, "
                 "without NCCL: ${why}")
  set(NCCL_LIB_DIR "")
endif()

file(GLOB DDPLUA_CUDA_SOURCES CONFIGURE_DEPENDS src/backends/cuda/*.c src/backends/cuda/*.cu)
if(NOT DDPLUA_HAVE_NCCL)
  list(FILTER DDPLUA_CUDA_SOURCES EXCLUDE REGEX "/nccl_group[^/]*\\.c$")
endif()
add_library(ddplua_cuda MODULE ${DDPLUA_CUDA_SOURCES})
target_include_directories(ddplua_cuda PRIVATE src ${LUA_INCLUDE_DIRS})
target_link_libraries(ddplua_cuda PRIVATE CUDA::cudart CUDA::cublas CUDA::cublasLt Threads::Threads m)
if(DDPLUA_HAVE_NCCL)
  target_include_directories(ddplua_cuda PRIVATE ${NCCL_INCLUDE_DIR})
  target_link_libraries(ddplua_cuda PRIVATE ${NCCL_LIBRARY})
else()
  target_compile_definitions(ddplua_cuda PRIVATE DP_CU_NO_NCCL)
endif()
target_compile_options(ddplua_cuda PRIVATE
  $<$<COMPILE_LANGUAGE:C>:-Wall -Wextra -Werror -fvisibility=hidden>
  "$<$<COMPILE_LANGUAGE:CUDA>:SHELL:-Werror all-warnings>"
  $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra,-Werror,-fvisibility=hidden>)
# --no-undefined: the plugin must not reach into the runtime by symbol (the
# runtime may be loaded RTLD_LOCAL); everything goes through dp_runtime_api.
# The toolkit's lib directory is an implicit link directory of nvcc, so
# CMake would leave it out of the RPATH: name it, so the plugin finds
# libcudart/libcublas/libnccl without LD_LIBRARY_PATH or ld.so.conf.
set_target_properties(ddplua_cuda PROPERTIES PREFIX "" OUTPUT_NAME ddplua_cuda
                      LIBRARY_OUTPUT_DIRECTORY ${DDPLUA_OUT_LIB}
                      LINK_OPTIONS "-Wl,--no-undefined"
                      CUDA_RUNTIME_LIBRARY Shared
                      BUILD_RPATH "${CUDAToolkit_LIBRARY_DIR};${NCCL_LIB_DIR}"
                      INSTALL_RPATH "${CUDAToolkit_LIBRARY_DIR};${NCCL_LIB_DIR}")
set(DDPLUA_HAVE_CUDA ON)

# A tiny reference program for bench/gpu.lua: cuBLAS GEMM peak (random
# operands, checked against a float64 reference), raw copy bandwidth
# (pinned / pageable) and, with NCCL, a raw NCCL all-reduce, without ddplua.
add_executable(ddplua_gpu_raw bench/gpu_raw.c)
target_link_libraries(ddplua_gpu_raw PRIVATE CUDA::cudart CUDA::cublas m)
target_include_directories(ddplua_gpu_raw PRIVATE src)
if(DDPLUA_HAVE_NCCL)
  target_link_libraries(ddplua_gpu_raw PRIVATE ${NCCL_LIBRARY})
  target_include_directories(ddplua_gpu_raw PRIVATE ${NCCL_INCLUDE_DIR})
  target_compile_definitions(ddplua_gpu_raw PRIVATE DDPLUA_HAVE_NCCL)
endif()
set_target_properties(ddplua_gpu_raw PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${DDPLUA_OUT_BIN}
                      BUILD_RPATH "${CUDAToolkit_LIBRARY_DIR};${NCCL_LIB_DIR}")
