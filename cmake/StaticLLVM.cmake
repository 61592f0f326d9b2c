# MLIR's exported targets name `LLVM` (the shared libLLVM.so) as their LLVM
# dependency. The GPU machine has no LLVM installed, so the tools must be
# self-contained: re-point that imported target at LLVM's static component
# archives and the few system libraries they need.
execute_process(
  COMMAND "${LLVM_TOOLS_BINARY_DIR}/llvm-config" --link-static --libfiles
          support demangle targetparser binaryformat remarks bitstreamreader core
  OUTPUT_VARIABLE ATTNC_LLVM_STATIC_LIBS
  OUTPUT_STRIP_TRAILING_WHITESPACE
  COMMAND_ERROR_IS_FATAL ANY)
separate_arguments(ATTNC_LLVM_STATIC_LIBS UNIX_COMMAND "${ATTNC_LLVM_STATIC_LIBS}")
list(GET ATTNC_LLVM_STATIC_LIBS 0 ATTNC_LLVM_FIRST_LIB)
list(REMOVE_AT ATTNC_LLVM_STATIC_LIBS 0)

find_library(ATTNC_ZSTD_STATIC NAMES libzstd.a)
set(ATTNC_LLVM_SYSTEM_LIBS pthread rt dl m)
if(ATTNC_ZSTD_STATIC)
  list(APPEND ATTNC_LLVM_SYSTEM_LIBS ${ATTNC_ZSTD_STATIC})
endif()
find_library(ATTNC_Z_STATIC NAMES libz.a)
if(ATTNC_Z_STATIC)
  list(APPEND ATTNC_LLVM_SYSTEM_LIBS ${ATTNC_Z_STATIC})
else()
  list(APPEND ATTNC_LLVM_SYSTEM_LIBS z)
endif()

get_target_property(_attnc_llvm_type LLVM TYPE)
set_target_properties(LLVM PROPERTIES
  IMPORTED_LOCATION "${ATTNC_LLVM_FIRST_LIB}"
  IMPORTED_LOCATION_RELWITHDEBINFO "${ATTNC_LLVM_FIRST_LIB}"
  IMPORTED_LOCATION_RELEASE "${ATTNC_LLVM_FIRST_LIB}"
  IMPORTED_NO_SONAME TRUE
  INTERFACE_LINK_LIBRARIES "${ATTNC_LLVM_STATIC_LIBS};${ATTNC_LLVM_SYSTEM_LIBS}")
# The archives depend on each other cyclically; let the linker rescan them.
set_property(TARGET LLVM PROPERTY IMPORTED_LINK_INTERFACE_MULTIPLICITY 3)
