# Writes a C++ file holding every template file as a string, so the compiler
# finds its templates without a source tree at run time.
# Inputs: TEMPLATES_DIR, OUTPUT.
file(GLOB_RECURSE template_files RELATIVE "${TEMPLATES_DIR}"
     "${TEMPLATES_DIR}/*.cuh" "${TEMPLATES_DIR}/*.h")
list(SORT template_files)
set(body "// Generated from templates/ by EmbedTemplates.cmake.\n#include \"attn/CodeGen/CudaEmitter.h\"\n\nnamespace attn::codegen {\nconst std::vector<EmbeddedTemplate> &embeddedTemplates() {\n  static const std::vector<EmbeddedTemplate> files = {\n")
foreach(file ${template_files})
  file(READ "${TEMPLATES_DIR}/${file}" contents)
  string(APPEND body "    {\"${file}\", R\"attn_template(${contents})attn_template\"},\n")
endforeach()
string(APPEND body "  };\n  return files;\n}\n} // namespace attn::codegen\n")
file(WRITE "${OUTPUT}.tmp" "${body}")
execute_process(COMMAND ${CMAKE_COMMAND} -E copy_if_different "${OUTPUT}.tmp" "${OUTPUT}")
