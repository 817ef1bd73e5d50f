# Warnings and sanitizers shared by every ferry target.

if(FERRY_SANITIZE)
  string(REPLACE "," ";" _ferry_sanitizers "${FERRY_SANITIZE}")
  foreach(_s IN LISTS _ferry_sanitizers)
    if(NOT _s MATCHES "^(address|undefined|thread|leak)$")
      message(FATAL_ERROR "FERRY_SANITIZE: unknown sanitizer '${_s}' (use address,undefined or thread)")
    endif()
  endforeach()
  add_compile_options(-fsanitize=${FERRY_SANITIZE} -fno-omit-frame-pointer -fno-sanitize-recover=all)
  add_link_options(-fsanitize=${FERRY_SANITIZE})
  # Sanitizer builds compile at -O1 with line tables only (after the build type's flags, so
  # these win): the reports keep file:line stacks, and the optimizer's back end, most of a
  # RelWithDebInfo compile here, costs less (about 16% off a large test file at -O1; -O0 was
  # tried and halves it, but CPU-heavy tests then overrun their bounds on a loaded 2-core VM).
  if(CMAKE_CXX_COMPILER_ID MATCHES "Clang" AND CMAKE_BUILD_TYPE STREQUAL "RelWithDebInfo")
    add_compile_options(-O1 -gline-tables-only)
  endif()
endif()

function(ferry_apply_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wshadow -Wnon-virtual-dtor
                         -Wold-style-cast -Wcast-align -Woverloaded-virtual -Wimplicit-fallthrough)
  if(CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    # STYLE.md 6: lock annotations are checked by clang.
    target_compile_options(${target} PRIVATE -Wthread-safety)
  endif()
  if(FERRY_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
endfunction()

# ferry_room(<name> SOURCES ... [PUBLIC_DEPS ...] [PRIVATE_DEPS ...]): one static library per
# room of DESIGN.md. Rooms expose their own folder as an include root ("core/location.h").
function(ferry_room name)
  cmake_parse_arguments(R "" "" "SOURCES;PUBLIC_DEPS;PRIVATE_DEPS" ${ARGN})
  add_library(${name} STATIC ${R_SOURCES})
  target_include_directories(${name} PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/src>)
  target_link_libraries(${name} PUBLIC ferry_headers ${R_PUBLIC_DEPS} PRIVATE ${R_PRIVATE_DEPS})
  ferry_apply_warnings(${name})
endfunction()
