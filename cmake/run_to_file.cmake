# cmake -DOUT=file -DBIN=prog -DARGS="arg,arg,..." -P run_to_file.cmake: run
# BIN with ARGS and write its standard output to OUT (add_custom_command has no portable
# redirection). Used to generate the man page and the shell completions
# with the dlock binary itself.
string(REPLACE "," ";" args "${ARGS}")
execute_process(COMMAND ${BIN} ${args} OUTPUT_FILE ${OUT}.tmp RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  file(REMOVE ${OUT}.tmp)
  message(FATAL_ERROR "'${BIN} ${args}' failed (${rc}) while generating ${OUT}")
endif()
file(RENAME ${OUT}.tmp ${OUT})
