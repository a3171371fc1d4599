# Writes OUT: a C file defining "const char NAME[]", the text of FILE with its final newline
# removed (so that a statement kept in a file is the same string as in a configuration).
file(READ ${FILE} hex HEX)
string(REGEX REPLACE "0a$" "" hex "${hex}")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
file(WRITE ${OUT}.tmp "/* Generated from ${FILE} by cmake/embed_text.cmake; do not edit. */\nconst char ${NAME}[] = { ${bytes} 0x00 };\n")
file(RENAME ${OUT}.tmp ${OUT})
