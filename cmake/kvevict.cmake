# kvevict_library(NAME DIR): a static library of every .cpp below DIR (an INTERFACE library while
# the folder has no sources yet), so adding a file never means editing a source list.
function(kvevict_library name dir)
  file(GLOB_RECURSE sources CONFIGURE_DEPENDS ${dir}/*.cpp)
  if(sources)
    add_library(${name} STATIC ${sources})
    set(${name}_VISIBILITY PUBLIC PARENT_SCOPE)
  else()
    add_library(${name} INTERFACE)
    set(${name}_VISIBILITY INTERFACE PARENT_SCOPE)
  endif()
endfunction()
