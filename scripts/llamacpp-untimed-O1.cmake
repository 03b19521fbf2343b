# Read into the llama.cpp peer's configure by scripts/install-peers.sh: llama.cpp's
# `common` library (argument parsing, chat templates, downloads) and the HTTP client it
# vendors run nothing llama-bench times, so they are compiled at -O1, which builds them
# a third quicker; ggml and libllama, what the peer's tokens/s measure, keep the Release
# build's -O3.
if(NOT QMV_UNTIMED_O1)
  set(QMV_UNTIMED_O1 ON)
  function(qmv_untimed_at_o1)
    foreach(target llama-common cpp-httplib)
      if(TARGET ${target})
        set_property(TARGET ${target} APPEND PROPERTY COMPILE_OPTIONS -O1)
      endif()
    endforeach()
  endfunction()
  # At the end of the top-level directory, once every target is defined.
  cmake_language(DEFER DIRECTORY "${CMAKE_SOURCE_DIR}" CALL qmv_untimed_at_o1)
endif()
