/* cf_profile: operator policy profiles, the trust boundary of the fleet.
 *
 * The request is untrusted, its policy included: a profile says what the
 * requests of one tenant may ask for, and a request can only narrow it.
 * A profile is chosen by the request topic a request arrived on (who may
 * write to which topic is the broker's job: SASL principals and ACLs); the
 * request's `identity` field stays informational.
 *
 * Profiles come from the worker configuration, one section each:
 *
 *   [profile.tenant-a]
 *   topic = codefleet.requests.tenant-a
 *   result-topic = codefleet.results.tenant-a
 *   backends = sandbox
 *   read-only-roots = /srv/datasets
 *
 * (or flags / keys `profile.<name>.<key>`).  The profile named `default`
 * governs the worker's `request-topic` and exists even when nothing
 * configures it.  Every key and its default is in cf_profile_conf_table
 * (docs/CONFIGURATION-worker.md, "Profiles"); the defaults deny: the
 * sandbox backend only, network disabled, no host paths, no environment
 * passthrough, no reply_to, limits no higher than the worker's.
 */
#ifndef CF_PROFILE_H
#define CF_PROFILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cf_backend.h"
#include "cf_config.h"
#include "cf_error.h"
#include "cf_schema.h"

#define CF_PROFILE_NAME_MAX 64
#define CF_PROFILE_MAX 64 /* profiles (and so request topics) of one worker */

typedef struct cf_profile {
    /* From the table (owned). */
    char *topic;             /* the request topic it governs */
    char *result_topic;      /* NULL/"": the worker's result-topic */
    char *backends;          /* comma list; the first is the default */
    char *languages;         /* comma list or "*" */
    int64_t network;         /* enum index: 0 disabled, 1 enabled (the most a request may ask) */
    char *read_only_roots;   /* comma list of host directories (paths mode, read-only binds) */
    char *read_write_roots;  /* comma list of host directories (read-write binds; read-only too) */
    char *env_allow;         /* comma list of worker environment names env_allow may pass */
    char *network_allow;     /* comma list of IPv4 CIDRs reachable despite the default refusals */
    char *reply_to;          /* comma list of topics, or prefixes ending in '*' */
    char *state_prefix;      /* workspace and thread ids must start with it; "*" any; unset none */
    int64_t max_timeout_us;  /* 0: the worker's max-timeout */
    int64_t max_cpu_time_us; /* 0: the worker's max-timeout */
    int64_t max_memory_bytes;    /* 0: no profile cap (the backend's default applies) */
    int64_t default_memory_bytes; /* requests setting none (0: max_memory_bytes, else the backend's) */
    int64_t max_processes;       /* 0: no profile cap */
    int64_t max_output_bytes;    /* 0: the worker's max-output */
    int64_t max_file_size_bytes; /* 0: no profile cap */
    char *images;                /* container images a request may name: comma list or "*" */
    int64_t weight;              /* share of the slots against other profiles with work */
    int64_t max_slots;           /* most slots held at once (0: auto, see profile.c) */
    int64_t max_stored_results;  /* results kept for replay at once (0: no cap) */
    int64_t max_stored_result_bytes; /* their bytes (0: no cap) */
    int64_t max_workspace_bytes;     /* what its workspaces may hold in Redis together (0: no cap) */
    int64_t max_checkpoint_bytes;    /* ... its checkpoint threads */

    /* Derived at load (owned). */
    char name[CF_PROFILE_NAME_MAX + 1];
    char **backend_names;
    size_t n_backends;
    char **image_names;     /* NULL with images "*": every image of the worker */
    size_t n_images;
    uint32_t language_mask; /* bit (1u << cf_language) */
    char **ro_roots;        /* canonical (realpath), no trailing '/' */
    size_t n_ro_roots;
    char **rw_roots;
    size_t n_rw_roots;
    char **env_names;
    size_t n_env_names;
    char **reply_rules;
    size_t n_reply_rules;
    cf_cidr4 *net_allow;
    size_t n_net_allow;
} cf_profile;

/* The keys of one profile, for the docs and for loading. */
extern const cf_conf_table cf_profile_conf_table;

typedef struct cf_profile_set cf_profile_set;

/* What the profiles are checked against at load. */
typedef struct cf_profile_env {
    const char *request_topic;  /* the `default` profile's topic ("" = none) */
    const char *result_topic;   /* the worker's default result topic */
    const char *dlq_topic;
    const char *events_topic;   /* never a reply_to target either */
    const char *workers_topic;  /* the workers' reports: never a request, result or reply_to topic */
    const char *env_prefix;     /* names with this prefix are never passed (worker secrets) */
    const char *stream_suffix;  /* output topics: <result topic> + this ("" = no streaming) */
    const cf_backend_set *backends; /* every profile backend must be enabled here */
} cf_profile_env;

/* Builds the profiles from `kv` (keys "<name>.<key>", as the config's
 * "profile." pass-through stores them), adding `default` when missing.
 * Fails on unknown keys, bad values, duplicate topics, backends not enabled
 * on the worker, roots that are not existing directories, and env names
 * with the worker's prefix. */
int cf_profile_set_new(const cf_kvlist *kv, const cf_profile_env *env, cf_profile_set **out, cf_error *err);
void cf_profile_set_destroy(cf_profile_set *set);

size_t cf_profile_set_count(const cf_profile_set *set);
const cf_profile *cf_profile_set_get(const cf_profile_set *set, size_t i);
/* The profile governing a request topic, or NULL. */
const cf_profile *cf_profile_set_for_topic(const cf_profile_set *set, const char *topic);
/* Whether topic is a request topic of any profile. */
bool cf_profile_set_is_request_topic(const cf_profile_set *set, const char *topic);

/* The backend name a request on this profile runs under: its own, or the
 * profile's first. */
const char *cf_profile_backend_for(const cf_profile *p, const cf_request *req);

/* Checks req against the profile and fills the limits it sets none of
 * from the profile's maxima (so a default never exceeds them).  Returns 0,
 * or -1 with a reason naming the profile and the control
 * ("profile 'tenant-a': network=enabled is not allowed").  `backend` is
 * the backend chosen (cf_profile_backend_for).  Does not check what the
 * backend can enforce (cf_policy_check does, afterwards). */
int cf_profile_admit(const cf_profile *p, const cf_profile_set *set, const char *backend, cf_request *req,
                     char *reason, size_t rsz);

/* Whether the worker may write a streaming request's output chunks to
 * topic (its result topic plus the stream suffix): a valid name that is
 * none of the fleet's own topics (request, dead-letter, events, workers,
 * `__*`, any result topic) and, inside the fleet's tenant namespaces
 * (<result-topic>.*, <request-topic>.*), only below the profile's own
 * result topic.  reason says why not. */
bool cf_profile_output_topic_ok(const cf_profile *p, const cf_profile_set *set, const char *topic, char *reason,
                                size_t rsz);

/* The result topic of requests on this profile. */
const char *cf_profile_result_topic(const cf_profile *p, const cf_profile_env *env);

#endif
