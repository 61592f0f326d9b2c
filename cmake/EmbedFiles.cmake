# Writes a C++ file holding files of a directory as strings, so a binary
# finds them without a source tree at run time (the compiler's kernel
# templates; the example specs the GPU tests read).
# Inputs (cmake -D... -P EmbedFiles.cmake):
#   DIR        the directory
#   PATTERNS   globs below it, comma-separated (e.g. "*.cuh,*.h")
#   OUTPUT     the C++ file to write (rewritten only when it changes)
#   INCLUDE    the header that declares TYPE and FUNCTION
#   NAMESPACE  FUNCTION  TYPE
#              `const std::vector<TYPE> &NAMESPACE::FUNCTION()`, TYPE being
#              an aggregate {const char *path; const char *contents;}; paths
#              relative to DIR, sorted.
string(REPLACE "," ";" patterns "${PATTERNS}")
set(globs)
foreach(pattern ${patterns})
  list(APPEND globs "${DIR}/${pattern}")
endforeach()
file(GLOB_RECURSE files RELATIVE "${DIR}" ${globs})
list(SORT files)
set(body "// Generated from ${DIR} by cmake/EmbedFiles.cmake.\n#include \"${INCLUDE}\"\n\nnamespace ${NAMESPACE} {\nconst std::vector<${TYPE}> &${FUNCTION}() {\n  static const std::vector<${TYPE}> files = {\n")
foreach(file ${files})
  file(READ "${DIR}/${file}" contents)
  string(FIND "${contents}" ")attn_embedded\"" clash)
  if(NOT clash EQUAL -1)
    message(FATAL_ERROR "${DIR}/${file} holds the raw-string delimiter )attn_embedded\"")
  endif()
  string(APPEND body "    {\"${file}\", R\"attn_embedded(${contents})attn_embedded\"},\n")
endforeach()
string(APPEND body "  };\n  return files;\n}\n} // namespace ${NAMESPACE}\n")
file(WRITE "${OUTPUT}.tmp" "${body}")
execute_process(COMMAND ${CMAKE_COMMAND} -E copy_if_different "${OUTPUT}.tmp" "${OUTPUT}")
