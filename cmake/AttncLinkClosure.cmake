# attnc_link_closure(TARGET STOP BUNDLE_VAR LINK_VAR)
#
# Walks the link dependencies of TARGET for the installed attnc::compiler,
# whose consumers have no MLIR or LLVM CMake package to resolve names like
# MLIRIR. BUNDLE_VAR receives the project's own library targets (their
# objects go into one archive); LINK_VAR the rest, flattened: a
# $<TARGET_FILE:...> per imported library (MLIR's archives, and LLVM's as
# StaticLLVM.cmake re-points them), plus plain paths and system libraries,
# dependents before their dependencies. The target STOP (attn_runtime,
# exported on its own) and what it links are left out; Threads::Threads is
# kept by name (attnc-config.cmake finds it).
function(attnc_link_closure target stop bundle_var link_var)
  set_property(GLOBAL PROPERTY _attnc_visited "${stop}")
  set_property(GLOBAL PROPERTY _attnc_bundle "")
  set_property(GLOBAL PROPERTY _attnc_link "")
  _attnc_walk("${target}")
  get_property(bundle GLOBAL PROPERTY _attnc_bundle)
  get_property(link GLOBAL PROPERTY _attnc_link)
  # Post-order lists dependencies first; the linker wants them last.
  list(REVERSE bundle)
  list(REVERSE link)
  set(${bundle_var} "${bundle}" PARENT_SCOPE)
  set(${link_var} "${link}" PARENT_SCOPE)
endfunction()

function(_attnc_walk item)
  # MLIR's exported targets wrap private dependencies of static libraries.
  string(REGEX REPLACE "^\\$<LINK_ONLY:(.*)>$" "\\1" item "${item}")
  # Directory markers of target_link_libraries called from another directory.
  if(item MATCHES "^::@")
    return()
  endif()
  if(item MATCHES "\\$<")
    message(FATAL_ERROR "attnc_link_closure: cannot flatten '${item}'")
  endif()
  get_property(visited GLOBAL PROPERTY _attnc_visited)
  if("${item}" IN_LIST visited)
    return()
  endif()
  set_property(GLOBAL APPEND PROPERTY _attnc_visited "${item}")

  if(NOT TARGET "${item}" OR item STREQUAL "Threads::Threads")
    set_property(GLOBAL APPEND PROPERTY _attnc_link "${item}")
    return()
  endif()
  get_target_property(imported "${item}" IMPORTED)
  get_target_property(type "${item}" TYPE)
  if(imported OR type STREQUAL "INTERFACE_LIBRARY")
    get_target_property(deps "${item}" INTERFACE_LINK_LIBRARIES)
  else()
    get_target_property(deps "${item}" LINK_LIBRARIES)
  endif()
  # Children in reverse, so that the reversed post-order keeps siblings in
  # their given order (LLVM's archives come from llvm-config in link order).
  if(deps)
    list(REVERSE deps)
    foreach(dep IN LISTS deps)
      _attnc_walk("${dep}")
    endforeach()
  endif()
  if(type STREQUAL "INTERFACE_LIBRARY")
    return()
  elseif(NOT imported)
    if(NOT type STREQUAL "STATIC_LIBRARY")
      message(FATAL_ERROR "attnc_link_closure: ${item} is a ${type}, not a static library")
    endif()
    set_property(GLOBAL APPEND PROPERTY _attnc_bundle "${item}")
  else()
    set_property(GLOBAL APPEND PROPERTY _attnc_link "$<TARGET_FILE:${item}>")
  endif()
endfunction()
