# The CUDA backend plugin, lib/ddplua_cuda.so: kernels (src/backends/cuda/*.cu),
# cuBLAS GEMMs, the caching allocator and the NCCL process group. Included
# from CMakeLists.txt when DDPLUA_CUDA is ON; without a toolkit it prints
# one line and builds nothing CUDA (the runtime then says why CUDA is
# unavailable when a script asks for it).
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
find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} ${CUDAToolkit_LIBRARY_ROOT}/include)
find_library(NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_LIBRARY_ROOT}/lib)
if(NOT NCCL_INCLUDE_DIR OR NOT NCCL_LIBRARY)
  message(STATUS "ddplua: CUDA ${CUDAToolkit_VERSION} found but not NCCL: building without the CUDA backend")
  return()
endif()
message(STATUS "ddplua: CUDA backend for ${CMAKE_CUDA_ARCHITECTURES} with CUDA ${CUDAToolkit_VERSION}, "
               "NCCL ${NCCL_LIBRARY}")

file(GLOB DDPLUA_CUDA_SOURCES CONFIGURE_DEPENDS src/backends/cuda/*.c src/backends/cuda/*.cu)
add_library(ddplua_cuda MODULE ${DDPLUA_CUDA_SOURCES})
target_include_directories(ddplua_cuda PRIVATE src ${NCCL_INCLUDE_DIR} ${LUA_INCLUDE_DIRS})
target_link_libraries(ddplua_cuda PRIVATE CUDA::cudart CUDA::cublas CUDA::cublasLt ${NCCL_LIBRARY} Threads::Threads m)
target_compile_options(ddplua_cuda PRIVATE
  $<$<COMPILE_LANGUAGE:C>:-Wall -Wextra -Werror -fvisibility=hidden>
  "$<$<COMPILE_LANGUAGE:CUDA>:SHELL:-Werror all-warnings>"
  $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra,-Werror,-fvisibility=hidden>)
# --no-undefined: the plugin must not reach into the runtime by symbol (the
# runtime may be loaded RTLD_LOCAL); everything goes through dp_runtime_api.
# The toolkit's lib directory is an implicit link directory of nvcc, so
# CMake would leave it out of the RPATH: name it, so the plugin finds
# libcudart/libcublas/libnccl without LD_LIBRARY_PATH or ld.so.conf.
get_filename_component(NCCL_LIB_DIR ${NCCL_LIBRARY} DIRECTORY)
set_target_properties(ddplua_cuda PROPERTIES PREFIX "" OUTPUT_NAME ddplua_cuda
                      LIBRARY_OUTPUT_DIRECTORY ${DDPLUA_OUT_LIB}
                      LINK_OPTIONS "-Wl,--no-undefined"
                      CUDA_RUNTIME_LIBRARY Shared
                      BUILD_RPATH "${CUDAToolkit_LIBRARY_DIR};${NCCL_LIB_DIR}"
                      INSTALL_RPATH "${CUDAToolkit_LIBRARY_DIR};${NCCL_LIB_DIR}")
set(DDPLUA_HAVE_CUDA ON)

# A tiny reference program for bench/gpu.lua: cuBLAS GEMM peak, raw copy
# bandwidth (pinned / pageable) and a raw NCCL all-reduce, without ddplua.
add_executable(ddplua_gpu_raw bench/gpu_raw.c)
target_link_libraries(ddplua_gpu_raw PRIVATE CUDA::cudart CUDA::cublas ${NCCL_LIBRARY})
target_include_directories(ddplua_gpu_raw PRIVATE ${NCCL_INCLUDE_DIR})
set_target_properties(ddplua_gpu_raw PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${DDPLUA_OUT_BIN}
                      BUILD_RPATH "${CUDAToolkit_LIBRARY_DIR};${NCCL_LIB_DIR}")
