# Compiler flags of a fuzzing build (-DFERRY_BUILD_FUZZERS=ON), included from the top-level
# CMakeLists.txt before any target exists. Every target of the build directory gets coverage
# instrumentation for libFuzzer plus ASan and UBSan, so the code a harness reaches in the rooms'
# libraries guides the fuzzer and is checked; the harnesses themselves add libFuzzer's main
# (fuzz/CMakeLists.txt). Build only the fuzz targets there (`--target ferry_fuzzers`).

if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  message(FATAL_ERROR "FERRY_BUILD_FUZZERS needs clang (libFuzzer), not "
                      "${CMAKE_CXX_COMPILER_ID}: configure with -DCMAKE_CXX_COMPILER=clang++")
endif()
if(FERRY_SANITIZE)
  message(FATAL_ERROR "FERRY_BUILD_FUZZERS brings its own sanitizers (address,undefined); "
                      "leave FERRY_SANITIZE empty in a fuzzing build")
endif()

add_compile_options(-fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer
                    -fno-sanitize-recover=all)
add_link_options(-fsanitize=address,undefined)
