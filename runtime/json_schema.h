/* json_schema.h: a JSON Schema (response_format json_schema) as a GBNF grammar (grammar.h) whose sentences are the
 * JSON texts that validate against it, as llama.cpp's json_schema_to_grammar writes one.
 *
 * Supported: type (one, or a list), properties with required (the required ones first, in the schema's order,
 * then the optional ones in theirs, each may be left out), additionalProperties false or absent (no other key:
 * what strict mode asks) or true (any other key after them), enum and const of strings, numbers, booleans and null,
 * items with minItems and maxItems, anyOf and oneOf (any of the alternatives), $ref to #/$defs/NAME or
 * #/definitions/NAME (recursion allowed), strings with minLength, maxLength and the formats date, time, date-time
 * and uuid (date: YYYY-MM-DD with months 01-12 and days 01-31, not checked against the month), integers and numbers
 * with minimum 0 (no sign), integers with minimum 1 or exclusiveMinimum 0; an empty schema is any JSON value.
 * The annotations (title, description, default, examples, $schema, $id, $comment, strict) are read and left out.
 * Anything else (pattern, maximum, allOf, prefixItems, not, if, ...) is refused naming the keyword and where it is,
 * never ignored: a reply would not validate. Whitespace between tokens is one space or a newline and up to 20
 * blanks at most, as grammar_json_object_gbnf has it. */
#ifndef LLMCC_JSON_SCHEMA_H
#define LLMCC_JSON_SCHEMA_H
#include <stddef.h>

/* The grammar (malloc'd GBNF text, its root rule "root") of schema[0..len); NULL with a one-line reason in err:
 * "properties.age.maximum: not supported yet", or the schema not being JSON */
char *json_schema_to_gbnf(const char *schema, size_t len, char *err, size_t err_size);
#endif
