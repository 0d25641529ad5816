/* workspace_patch: OpenAI's V4A patch format (the apply_patch tool of their
 * models and of codex), applied to a set of files, all or nothing.
 *
 *   *** Begin Patch
 *   *** Add File: path        then the file's lines, each "+"
 *   *** Delete File: path
 *   *** Update File: path     optionally "*** Move to: new/path", then
 *                             hunks: "@@" or "@@ <a line to find first>",
 *                             lines " " (context), "-" (removed), "+" (added),
 *                             and "*** End of File" (the hunk ends the file)
 *   *** End Patch
 *
 * A hunk's context and removed lines are found in order from where the last
 * hunk ended: exactly, else ignoring trailing whitespace, else ignoring
 * surrounding whitespace (as the reference implementation does).  Pure: no
 * I/O, so unit tests drive it on plain arrays. */
#ifndef CF_WORKSPACE_PATCH_INT_H
#define CF_WORKSPACE_PATCH_INT_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "cf_schema.h"

/* Says whether a path the patch names may be written; false with why
 * filled refuses the patch. */
typedef bool (*ws_patch_path_ok)(const char *path, void *arg, char *why, size_t wsz);

/* Applies patch to *files (*n entries; paths and contents malloc'd, the
 * cf_workdir_files_free layout; the array may be reallocated and entries
 * added or removed).  Returns 0; or -1 with why saying which file, hunk
 * and patch line did not apply: then *files holds part of the change and
 * the caller discards it. */
int ws_patch_apply(const uint8_t *patch, size_t len, cf_file **files, size_t *n, ws_patch_path_ok path_ok, void *arg,
                   char *why, size_t wsz);

#endif
