/* fuzz_skillmd - libFuzzer target for SKILL.md (skills/skills.c): the
 * frontmatter parser (YAML between "---" lines, read into JSON) and the name
 * rule. Checks what the skills code relies on: a parsed file has an object
 * frontmatter and a body, and name/description are strings. Build and run
 * with scripts/fuzz.sh. */
#include "skills/skills.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* abort() names the broken promise */
#define check(cond) ((cond) ? (void)0 : (fprintf(stderr, "check failed: %s\n", #cond), abort()))

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        /* an exact-size copy, so any read past the end is caught */
        char *text = xmalloc(size ? size : 1);
        memcpy(text, data, size);
        ab_skill_md md;
        ab_err *e = NULL;
        if (ab_skill_md_parse(text, size, &md, &e) == 0) {
                check(json_is_object(md.front) && md.body);
                if (md.name) {
                        (void)ab_skill_name_ok(md.name);
                        check(json_is_string(json_object_get(md.front, "name")) ||
                              json_is_number(json_object_get(md.front, "name")) ||
                              json_is_boolean(json_object_get(md.front, "name")));
                }
                char *dump = json_dumps(md.front, JSON_COMPACT);
                check(dump != NULL);
                free(dump);
                ab_skill_md_clear(&md);
        } else {
                check(e && !strncmp(e->msg, "Invalid SKILL.md format", 23));
                ab_err_free(&e);
        }
        free(text);
        return 0;
}
