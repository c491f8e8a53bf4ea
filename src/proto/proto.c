/* proto.c - framing and message encoding of the agentbox-init protocol. */
#include "proto/proto.h"
#include "base/util.h"

#include <errno.h>
#include <poll.h>
#include <sys/socket.h>

#define FIELD_HDR  8
#define READER_MAX (ABP_HDR_SIZE + (size_t)ABP_MAX_PAYLOAD)

static void le32(uint8_t *p, uint32_t v)
{
        p[0] = (uint8_t)v;
        p[1] = (uint8_t)(v >> 8);
        p[2] = (uint8_t)(v >> 16);
        p[3] = (uint8_t)(v >> 24);
}

static void le64(uint8_t *p, uint64_t v)
{
        le32(p, (uint32_t)v);
        le32(p + 4, (uint32_t)(v >> 32));
}

static uint32_t get32(const uint8_t *p)
{
        return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t get64(const uint8_t *p)
{
        return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32;
}

/* ---- encoding ---- */

void abp_buf_free(abp_buf *b)
{
        free(b->p);
        *b = (abp_buf){0};
}

void abp_buf_consume(abp_buf *b, size_t n)
{
        if (n >= b->len) {
                b->len = 0;
        } else {
                memmove(b->p, b->p + n, b->len - n);
                b->len -= n;
        }
        b->frame = 0;
}

/* Makes room for n more bytes, or marks the frame as overflowing. */
static uint8_t *reserve(abp_buf *b, size_t n)
{
        if (b->overflow)
                return NULL;
        if (n > READER_MAX || b->len - b->frame + n > READER_MAX) {
                b->overflow = true;
                return NULL;
        }
        if (b->len + n > b->cap) {
                size_t cap = b->cap ? b->cap : 256;
                while (cap < b->len + n)
                        cap = xmul(cap, 2);
                b->p = xrealloc(b->p, cap);
                b->cap = cap;
        }
        uint8_t *p = b->p + b->len;
        b->len += n;
        return p;
}

void abp_frame_begin(abp_buf *b, uint32_t type)
{
        b->frame = b->len;
        b->overflow = false;
        uint8_t *p = reserve(b, ABP_HDR_SIZE);
        le32(p, type);
        le32(p + 4, 0);
}

int abp_frame_end(abp_buf *b)
{
        if (b->overflow) {
                b->len = b->frame;
                b->overflow = false;
                return -EMSGSIZE;
        }
        le32(b->p + b->frame + 4, (uint32_t)(b->len - b->frame - ABP_HDR_SIZE));
        return 0;
}

static void put_field(abp_buf *b, uint32_t tag, const void *v, size_t n, bool nul)
{
        size_t vlen = n + (nul ? 1 : 0);
        if (n > READER_MAX) {
                b->overflow = true;
                return;
        }
        uint8_t *p = reserve(b, FIELD_HDR + vlen);
        if (!p)
                return;
        le32(p, tag);
        le32(p + 4, (uint32_t)vlen);
        if (n)
                memcpy(p + FIELD_HDR, v, n);
        if (nul)
                p[FIELD_HDR + n] = 0;
}

void abp_put_u32(abp_buf *b, uint32_t tag, uint32_t v)
{
        uint8_t x[4];
        le32(x, v);
        put_field(b, tag, x, sizeof(x), false);
}

void abp_put_u64(abp_buf *b, uint32_t tag, uint64_t v)
{
        uint8_t x[8];
        le64(x, v);
        put_field(b, tag, x, sizeof(x), false);
}

void abp_put_str(abp_buf *b, uint32_t tag, const char *s)
{
        put_field(b, tag, s, strlen(s), true);
}

void abp_put_bytes(abp_buf *b, uint32_t tag, const void *p, size_t n)
{
        put_field(b, tag, p, n, false);
}

int abp_enc_empty(abp_buf *b, uint32_t type)
{
        abp_frame_begin(b, type);
        return abp_frame_end(b);
}

int abp_enc_exec(abp_buf *b, const abp_exec_req *m)
{
        abp_frame_begin(b, ABP_EXEC);
        if (m->n_argv == 0)
                abp_put_str(b, ABP_F_COMMAND, m->command ? m->command : "");
        for (size_t i = 0; i < m->n_argv; i++)
                abp_put_str(b, ABP_F_ARGV, m->argv[i]);
        for (size_t i = 0; i < m->n_env; i++)
                abp_put_str(b, ABP_F_ENV, m->env[i]);
        if (m->cwd)
                abp_put_str(b, ABP_F_CWD, m->cwd);
        if (m->user && m->user[0])
                abp_put_str(b, ABP_F_USER, m->user);
        if (m->stdin_data)
                abp_put_bytes(b, ABP_F_STDIN, m->stdin_data, m->stdin_len);
        if (m->stdin_stream)
                abp_put_u32(b, ABP_F_STDIN_STREAM, 1);
        if (m->timeout_ms)
                abp_put_u32(b, ABP_F_TIMEOUT_MS, m->timeout_ms);
        if (m->output_cap)
                abp_put_u64(b, ABP_F_OUTPUT_CAP, m->output_cap);
        return abp_frame_end(b);
}

int abp_enc_file(abp_buf *b, uint32_t type, const abp_file_req *m)
{
        abp_frame_begin(b, type);
        abp_put_str(b, ABP_F_PATH, m->path ? m->path : "");
        if (m->to)
                abp_put_str(b, ABP_F_TO, m->to);
        if (m->owner)
                abp_put_str(b, ABP_F_OWNER, m->owner);
        if (m->group)
                abp_put_str(b, ABP_F_GROUP, m->group);
        if (m->offset)
                abp_put_u64(b, ABP_F_OFFSET, m->offset);
        if (m->length)
                abp_put_u64(b, ABP_F_LENGTH, m->length);
        if (m->flags)
                abp_put_u32(b, ABP_F_FLAGS, m->flags);
        if (m->mode)
                abp_put_u32(b, ABP_F_MODE, m->mode);
        if (m->depth)
                abp_put_u32(b, ABP_F_DEPTH, m->depth);
        return abp_frame_end(b);
}

int abp_enc_data(abp_buf *b, uint32_t stream, const void *data, size_t len)
{
        abp_frame_begin(b, ABP_DATA);
        abp_put_u32(b, ABP_F_STREAM, stream);
        abp_put_bytes(b, ABP_F_DATA, data, len);
        return abp_frame_end(b);
}

int abp_enc_ok(abp_buf *b, const abp_ok *m)
{
        abp_frame_begin(b, ABP_OK);
        if (m && m->version)
                abp_put_str(b, ABP_F_VERSION, m->version);
        if (m && m->proto)
                abp_put_u32(b, ABP_F_PROTO, m->proto);
        return abp_frame_end(b);
}

int abp_enc_error(abp_buf *b, const char *code, const char *message)
{
        abp_frame_begin(b, ABP_ERROR);
        abp_put_str(b, ABP_F_CODE, code);
        abp_put_str(b, ABP_F_MESSAGE, message ? message : "");
        return abp_frame_end(b);
}

int abp_enc_exit(abp_buf *b, const abp_exit *m)
{
        abp_frame_begin(b, ABP_EXIT);
        abp_put_u32(b, ABP_F_EXIT_CODE, (uint32_t)m->exit_code);
        abp_put_u32(b, ABP_F_TIMED_OUT, m->timed_out);
        abp_put_u32(b, ABP_F_TRUNCATED, m->truncated);
        abp_put_u64(b, ABP_F_DURATION_MS, m->duration_ms);
        abp_put_u64(b, ABP_F_STDOUT_BYTES, m->stdout_bytes);
        abp_put_u64(b, ABP_F_STDERR_BYTES, m->stderr_bytes);
        if (m->again)
                abp_put_u32(b, ABP_F_AGAIN, 1);
        return abp_frame_end(b);
}

int abp_enc_entry(abp_buf *b, const abp_entry *m)
{
        abp_frame_begin(b, ABP_ENTRY);
        abp_put_str(b, ABP_F_PATH, m->path);
        abp_put_u32(b, ABP_F_TYPE, m->type);
        abp_put_u64(b, ABP_F_SIZE, m->size);
        abp_put_u32(b, ABP_F_MODE, m->mode);
        abp_put_u64(b, ABP_F_MTIME, (uint64_t)m->mtime);
        if (m->link)
                abp_put_str(b, ABP_F_LINK, m->link);
        if (m->has_ids) {
                abp_put_u32(b, ABP_F_UID, m->uid);
                abp_put_u32(b, ABP_F_GID, m->gid);
        }
        if (m->owner)
                abp_put_str(b, ABP_F_OWNER, m->owner);
        if (m->group)
                abp_put_str(b, ABP_F_GROUP, m->group);
        return abp_frame_end(b);
}

/* ---- decoding ---- */

int abp_field_next(const abp_frame *f, size_t *off, abp_field *out)
{
        if (*off > f->len)
                return -EBADMSG;
        if (*off == f->len)
                return 0;
        size_t left = f->len - *off;
        if (left < FIELD_HDR)
                return -EBADMSG;
        const uint8_t *p = f->payload + *off;
        uint32_t len = get32(p + 4);
        if (len > left - FIELD_HDR)
                return -EBADMSG;
        out->tag = get32(p);
        out->len = len;
        out->val = p + FIELD_HDR;
        *off += FIELD_HDR + len;
        return 1;
}

static int val_u32(const abp_field *fl, uint32_t *v)
{
        if (fl->len != 4)
                return -EBADMSG;
        *v = get32(fl->val);
        return 0;
}

static int val_bool(const abp_field *fl, bool *v)
{
        uint32_t x;
        if (val_u32(fl, &x) < 0 || x > 1)
                return -EBADMSG;
        *v = x;
        return 0;
}

static int val_u64(const abp_field *fl, uint64_t *v)
{
        if (fl->len != 8)
                return -EBADMSG;
        *v = get64(fl->val);
        return 0;
}

static int val_str(const abp_field *fl, const char **s)
{
        if (fl->len == 0 || fl->val[fl->len - 1] != 0 || memchr(fl->val, 0, fl->len - 1))
                return -EBADMSG;
        *s = (const char *)fl->val;
        return 0;
}

/* Runs `body` (a switch on fl.tag that sets r) for every field of f. */
#define FOR_FIELDS(f, fl, r, body)                                                                 \
        do {                                                                                       \
                size_t _off = 0;                                                                   \
                int _n;                                                                            \
                while ((_n = abp_field_next((f), &_off, &(fl))) > 0) {                             \
                        body;                                                                      \
                        if (r < 0)                                                                 \
                                return -EBADMSG;                                                   \
                }                                                                                  \
                if (_n < 0)                                                                        \
                        return -EBADMSG;                                                           \
        } while (0)

bool abp_is_request(uint32_t type)
{
        return (type >= ABP_PING && type <= ABP_TERM_INPUT) || type == ABP_RESERVE ||
               type == ABP_GREP || type == ABP_WATCH || type == ABP_STATS || type == ABP_PORT;
}

bool abp_is_term_request(uint32_t type)
{
        return type >= ABP_TERM_OPEN && type <= ABP_TERM_INPUT;
}

void abp_exec_req_clear(abp_exec_req *m)
{
        free(m->env);
        free(m->argv);
        *m = (abp_exec_req){0};
}

int abp_dec_exec(const abp_frame *f, abp_exec_req *m)
{
        abp_field fl;
        int r = 0;
        size_t n_env = 0, n_argv = 0;

        *m = (abp_exec_req){0};
        if (f->type != ABP_EXEC)
                return -EBADMSG;
        FOR_FIELDS(f, fl, r, {
                n_env += fl.tag == ABP_F_ENV;
                n_argv += fl.tag == ABP_F_ARGV;
        });
        /* Both counts <= payload / FIELD_HDR, so these allocations are bounded. */
        const char **env = xcalloc(n_env + 1, sizeof(*env));
        const char **argv = n_argv ? xcalloc(n_argv + 1, sizeof(*argv)) : NULL;
        m->env = env;
        m->argv = argv;
        FOR_FIELDS(f, fl, r, {
                switch (fl.tag) {
                case ABP_F_COMMAND:
                        r = val_str(&fl, &m->command);
                        break;
                case ABP_F_ENV:
                        r = val_str(&fl, &env[m->n_env]);
                        m->n_env++;
                        break;
                case ABP_F_ARGV:
                        r = val_str(&fl, &argv[m->n_argv]);
                        m->n_argv++;
                        break;
                case ABP_F_CWD:
                        r = val_str(&fl, &m->cwd);
                        break;
                case ABP_F_USER:
                        r = val_str(&fl, &m->user);
                        break;
                case ABP_F_STDIN:
                        m->stdin_data = fl.val;
                        m->stdin_len = fl.len;
                        break;
                case ABP_F_STDIN_STREAM:
                        r = val_bool(&fl, &m->stdin_stream);
                        break;
                case ABP_F_TIMEOUT_MS:
                        r = val_u32(&fl, &m->timeout_ms);
                        break;
                case ABP_F_OUTPUT_CAP:
                        r = val_u64(&fl, &m->output_cap);
                        break;
                }
                if (r < 0)
                        abp_exec_req_clear(m);
        });
        if (!m->command == !m->argv) {
                abp_exec_req_clear(m);
                return -EBADMSG;
        }
        return 0;
}

int abp_dec_file(const abp_frame *f, abp_file_req *m)
{
        abp_field fl;
        int r = 0;

        *m = (abp_file_req){0};
        if ((f->type < ABP_READ || f->type > ABP_RENAME) && f->type != ABP_CHMOD &&
            f->type != ABP_CHOWN && f->type != ABP_SYMLINK && f->type != ABP_WATCH &&
            f->type != ABP_WATCH_EVENT)
                return -EBADMSG;
        FOR_FIELDS(f, fl, r, {
                switch (fl.tag) {
                case ABP_F_PATH:
                        r = val_str(&fl, &m->path);
                        break;
                case ABP_F_TO:
                        r = val_str(&fl, &m->to);
                        break;
                case ABP_F_OWNER:
                        r = val_str(&fl, &m->owner);
                        break;
                case ABP_F_GROUP:
                        r = val_str(&fl, &m->group);
                        break;
                case ABP_F_OFFSET:
                        r = val_u64(&fl, &m->offset);
                        break;
                case ABP_F_LENGTH:
                        r = val_u64(&fl, &m->length);
                        break;
                case ABP_F_FLAGS:
                        r = val_u32(&fl, &m->flags);
                        break;
                case ABP_F_MODE:
                        r = val_u32(&fl, &m->mode);
                        break;
                case ABP_F_DEPTH:
                        r = val_u32(&fl, &m->depth);
                        break;
                }
        });
        if (!m->path || ((f->type == ABP_RENAME || f->type == ABP_SYMLINK) && !m->to) ||
            (f->type == ABP_CHOWN && !m->owner && !m->group) ||
            (f->type == ABP_WATCH_EVENT &&
             (m->flags < ABP_WATCH_CREATE || m->flags > ABP_WATCH_CHMOD)))
                return -EBADMSG;
        return 0;
}

int abp_dec_data(const abp_frame *f, abp_data *m)
{
        abp_field fl;
        int r = 0;
        bool have_stream = false;

        *m = (abp_data){0};
        if (f->type != ABP_DATA)
                return -EBADMSG;
        FOR_FIELDS(f, fl, r, {
                switch (fl.tag) {
                case ABP_F_STREAM:
                        r = val_u32(&fl, &m->stream);
                        have_stream = true;
                        break;
                case ABP_F_DATA:
                        m->data = fl.val;
                        m->len = fl.len;
                        break;
                }
        });
        if (!have_stream || m->stream > 2)
                return -EBADMSG;
        return 0;
}

int abp_dec_ok(const abp_frame *f, abp_ok *m)
{
        abp_field fl;
        int r = 0;

        *m = (abp_ok){0};
        if (f->type != ABP_OK)
                return -EBADMSG;
        FOR_FIELDS(f, fl, r, {
                switch (fl.tag) {
                case ABP_F_VERSION:
                        r = val_str(&fl, &m->version);
                        break;
                case ABP_F_PROTO:
                        r = val_u32(&fl, &m->proto);
                        break;
                }
        });
        return 0;
}

int abp_dec_stats(const abp_frame *f, abp_stats *m)
{
        abp_field fl;
        int r = 0;

        *m = (abp_stats){0};
        if (f->type != ABP_OK)
                return -EBADMSG;
        FOR_FIELDS(f, fl, r, {
                switch (fl.tag) {
                case ABP_F_MEMORY:
                        r = val_u64(&fl, &m->memory);
                        m->has_memory = true;
                        break;
                case ABP_F_MEMORY_MAX:
                        r = val_u64(&fl, &m->memory_max);
                        m->has_memory_max = true;
                        break;
                case ABP_F_PIDS:
                        r = val_u64(&fl, &m->pids);
                        m->has_pids = true;
                        break;
                case ABP_F_CPU_NS:
                        r = val_u64(&fl, &m->cpu_ns);
                        m->has_cpu_ns = true;
                        break;
                case ABP_F_OOM_KILLS:
                        r = val_u64(&fl, &m->oom_kills);
                        m->has_oom_kills = true;
                        break;
                }
        });
        return 0;
}

int abp_dec_port(const abp_frame *f, uint32_t *port, uint32_t *timeout_ms)
{
        abp_field fl;
        int r = 0;

        *port = 0;
        *timeout_ms = 0;
        if (f->type != ABP_PORT)
                return -EBADMSG;
        FOR_FIELDS(f, fl, r, {
                if (fl.tag == ABP_F_PORT)
                        r = val_u32(&fl, port);
                else if (fl.tag == ABP_F_TIMEOUT_MS)
                        r = val_u32(&fl, timeout_ms);
        });
        return *port >= 1 && *port <= 65535 ? 0 : -EBADMSG;
}

int abp_dec_error(const abp_frame *f, abp_error *m)
{
        abp_field fl;
        int r = 0;

        *m = (abp_error){0};
        if (f->type != ABP_ERROR)
                return -EBADMSG;
        FOR_FIELDS(f, fl, r, {
                switch (fl.tag) {
                case ABP_F_CODE:
                        r = val_str(&fl, &m->code);
                        break;
                case ABP_F_MESSAGE:
                        r = val_str(&fl, &m->message);
                        break;
                }
        });
        if (!m->code)
                return -EBADMSG;
        if (!m->message)
                m->message = "";
        return 0;
}

int abp_dec_exit(const abp_frame *f, abp_exit *m)
{
        abp_field fl;
        int r = 0;
        uint32_t code = 0;
        bool have_code = false;

        *m = (abp_exit){0};
        if (f->type != ABP_EXIT)
                return -EBADMSG;
        FOR_FIELDS(f, fl, r, {
                switch (fl.tag) {
                case ABP_F_EXIT_CODE:
                        r = val_u32(&fl, &code);
                        have_code = true;
                        break;
                case ABP_F_TIMED_OUT:
                        r = val_bool(&fl, &m->timed_out);
                        break;
                case ABP_F_TRUNCATED:
                        r = val_bool(&fl, &m->truncated);
                        break;
                case ABP_F_DURATION_MS:
                        r = val_u64(&fl, &m->duration_ms);
                        break;
                case ABP_F_STDOUT_BYTES:
                        r = val_u64(&fl, &m->stdout_bytes);
                        break;
                case ABP_F_STDERR_BYTES:
                        r = val_u64(&fl, &m->stderr_bytes);
                        break;
                case ABP_F_AGAIN:
                        r = val_bool(&fl, &m->again);
                        break;
                }
        });
        if (!have_code)
                return -EBADMSG;
        m->exit_code = (int32_t)code;
        return 0;
}

int abp_dec_entry(const abp_frame *f, abp_entry *m)
{
        abp_field fl;
        int r = 0;
        uint64_t mtime = 0;
        bool has_uid = false, has_gid = false;

        *m = (abp_entry){0};
        if (f->type != ABP_ENTRY)
                return -EBADMSG;
        FOR_FIELDS(f, fl, r, {
                switch (fl.tag) {
                case ABP_F_PATH:
                        r = val_str(&fl, &m->path);
                        break;
                case ABP_F_TYPE:
                        r = val_u32(&fl, &m->type);
                        break;
                case ABP_F_SIZE:
                        r = val_u64(&fl, &m->size);
                        break;
                case ABP_F_MODE:
                        r = val_u32(&fl, &m->mode);
                        break;
                case ABP_F_MTIME:
                        r = val_u64(&fl, &mtime);
                        break;
                case ABP_F_LINK:
                        r = val_str(&fl, &m->link);
                        break;
                case ABP_F_UID:
                        r = val_u32(&fl, &m->uid);
                        has_uid = r == 0;
                        break;
                case ABP_F_GID:
                        r = val_u32(&fl, &m->gid);
                        has_gid = r == 0;
                        break;
                case ABP_F_OWNER:
                        r = val_str(&fl, &m->owner);
                        break;
                case ABP_F_GROUP:
                        r = val_str(&fl, &m->group);
                        break;
                }
        });
        m->has_ids = has_uid && has_gid;
        if (!m->path || m->type < ABP_T_FILE || m->type > ABP_T_OTHER)
                return -EBADMSG;
        m->mtime = (int64_t)mtime;
        return 0;
}

/* ---- grep ---- */

int abp_enc_grep(abp_buf *b, const abp_grep_req *m)
{
        abp_frame_begin(b, ABP_GREP);
        /* A str field: the pattern's bytes then one NUL. The decoder takes
         * the field's length, so a NUL inside is the pattern's own. */
        put_field(b, ABP_F_PATTERN, m->pattern, m->pattern_len, true);
        if (m->flags)
                abp_put_u32(b, ABP_F_FLAGS, m->flags);
        abp_put_u32(b, ABP_F_COUNT, m->count);
        if (m->timeout_ms)
                abp_put_u32(b, ABP_F_TIMEOUT_MS, m->timeout_ms);
        abp_put_u64(b, ABP_F_SIZE, m->size_max);
        for (size_t i = 0; i < m->n_paths; i++)
                abp_put_str(b, ABP_F_PATH, m->paths[i]);
        return abp_frame_end(b);
}

static int count_paths(const abp_frame *f, size_t *n)
{
        abp_field fl;
        int r = 0;
        *n = 0;
        FOR_FIELDS(f, fl, r, *n += fl.tag == ABP_F_PATH);
        return 0;
}

/* (FOR_FIELDS returns on a bad field: the caller frees what was made) */
static int grep_fields(const abp_frame *f, abp_grep_req *m)
{
        abp_field fl;
        int r = 0;
        FOR_FIELDS(f, fl, r, {
                switch (fl.tag) {
                case ABP_F_PATTERN:
                        if (fl.len < 1 || fl.val[fl.len - 1] != 0) {
                                r = -EBADMSG;
                                break;
                        }
                        m->pattern = (const char *)fl.val;
                        m->pattern_len = fl.len - 1;
                        break;
                case ABP_F_PATH:
                        r = val_str(&fl, &m->paths[m->n_paths]);
                        m->n_paths++;
                        break;
                case ABP_F_FLAGS:
                        r = val_u32(&fl, &m->flags);
                        break;
                case ABP_F_COUNT:
                        r = val_u32(&fl, &m->count);
                        break;
                case ABP_F_TIMEOUT_MS:
                        r = val_u32(&fl, &m->timeout_ms);
                        break;
                case ABP_F_SIZE:
                        r = val_u64(&fl, &m->size_max);
                        break;
                }
        });
        return 0;
}

int abp_dec_grep(const abp_frame *f, abp_grep_req *m)
{
        size_t n_paths;
        *m = (abp_grep_req){0};
        if (f->type != ABP_GREP || count_paths(f, &n_paths) < 0)
                return -EBADMSG;
        m->paths = n_paths ? xcalloc(n_paths + 1, sizeof(*m->paths)) : NULL;
        if (grep_fields(f, m) < 0 || !m->pattern) {
                abp_grep_req_clear(m);
                return -EBADMSG;
        }
        return 0;
}

void abp_grep_req_clear(abp_grep_req *m)
{
        free(m->paths);
        *m = (abp_grep_req){0};
}

int abp_enc_match(abp_buf *b, const abp_match *m)
{
        abp_frame_begin(b, ABP_MATCH);
        abp_put_u32(b, ABP_F_INDEX, m->index);
        abp_put_u64(b, ABP_F_LINE, m->line);
        abp_put_bytes(b, ABP_F_DATA, m->text ? m->text : "", m->len);
        return abp_frame_end(b);
}

int abp_dec_match(const abp_frame *f, abp_match *m)
{
        abp_field fl;
        int r = 0;
        bool has_index = false, has_line = false, has_data = false;

        *m = (abp_match){0};
        if (f->type != ABP_MATCH)
                return -EBADMSG;
        FOR_FIELDS(f, fl, r, {
                switch (fl.tag) {
                case ABP_F_INDEX:
                        r = val_u32(&fl, &m->index);
                        has_index = true;
                        break;
                case ABP_F_LINE:
                        r = val_u64(&fl, &m->line);
                        has_line = true;
                        break;
                case ABP_F_DATA:
                        m->text = fl.val;
                        m->len = fl.len;
                        has_data = true;
                        break;
                }
        });
        return has_index && has_line && has_data ? 0 : -EBADMSG;
}

/* ---- terminals ---- */

int abp_enc_term_req(abp_buf *b, uint32_t type, const abp_term_req *m)
{
        abp_frame_begin(b, type);
        if (m->id)
                abp_put_str(b, ABP_F_TERM_ID, m->id);
        for (size_t i = 0; i < m->n_argv; i++)
                abp_put_str(b, ABP_F_ARGV, m->argv[i]);
        for (size_t i = 0; i < m->n_env; i++)
                abp_put_str(b, ABP_F_ENV, m->env[i]);
        if (m->cwd)
                abp_put_str(b, ABP_F_CWD, m->cwd);
        if (m->user && m->user[0])
                abp_put_str(b, ABP_F_USER, m->user);
        if (m->cols)
                abp_put_u32(b, ABP_F_COLS, m->cols);
        if (m->rows)
                abp_put_u32(b, ABP_F_ROWS, m->rows);
        if (m->signal)
                abp_put_u32(b, ABP_F_SIGNAL, m->signal);
        if (m->data)
                abp_put_bytes(b, ABP_F_DATA, m->data, m->data_len);
        if (m->pipes)
                abp_put_u32(b, ABP_F_PIPES, 1);
        if (m->close_stdin)
                abp_put_u32(b, ABP_F_CLOSE_STDIN, 1);
        if (m->timeout_ms)
                abp_put_u32(b, ABP_F_TIMEOUT_MS, m->timeout_ms);
        if (m->command)
                abp_put_str(b, ABP_F_COMMAND, m->command);
        if (m->merge)
                abp_put_u32(b, ABP_F_MERGE, 1);
        if (m->snapshot)
                abp_put_u32(b, ABP_F_SNAPSHOT, 1);
        if (m->tag)
                abp_put_str(b, ABP_F_TAG, m->tag);
        return abp_frame_end(b);
}

int abp_enc_term(abp_buf *b, const abp_term_info *m)
{
        abp_frame_begin(b, ABP_TERM);
        abp_put_str(b, ABP_F_TERM_ID, m->id);
        for (size_t i = 0; i < m->n_argv; i++)
                abp_put_str(b, ABP_F_ARGV, m->argv[i]);
        abp_put_u32(b, ABP_F_COLS, m->cols);
        abp_put_u32(b, ABP_F_ROWS, m->rows);
        abp_put_u32(b, ABP_F_PID, m->pid);
        abp_put_u64(b, ABP_F_CREATED_MS, m->created_ms);
        abp_put_u32(b, ABP_F_RUNNING, m->running);
        if (m->has_exit)
                abp_put_u32(b, ABP_F_EXIT_CODE, (uint32_t)m->exit_code);
        if (m->pipes)
                abp_put_u32(b, ABP_F_PIPES, 1);
        if (m->timed_out)
                abp_put_u32(b, ABP_F_TIMED_OUT, 1);
        if (m->ended_ms)
                abp_put_u64(b, ABP_F_ENDED_MS, m->ended_ms);
        if (m->pipes)
                abp_put_u64(b, ABP_F_LINES, m->lines);
        if (m->tag)
                abp_put_str(b, ABP_F_TAG, m->tag);
        return abp_frame_end(b);
}

void abp_term_req_clear(abp_term_req *m)
{
        free(m->argv);
        free(m->env);
        *m = (abp_term_req){0};
}

void abp_term_info_clear(abp_term_info *m)
{
        free(m->argv);
        *m = (abp_term_info){0};
}

/* Counts the repeated ARGV and ENV fields of f. */
static int count_lists(const abp_frame *f, size_t *n_argv, size_t *n_env)
{
        abp_field fl;
        int r = 0;
        *n_argv = *n_env = 0;
        FOR_FIELDS(f, fl, r, {
                *n_argv += fl.tag == ABP_F_ARGV;
                *n_env += fl.tag == ABP_F_ENV;
        });
        return 0;
}

static int term_req_fields(const abp_frame *f, abp_term_req *m)
{
        abp_field fl;
        int r = 0;
        FOR_FIELDS(f, fl, r, {
                switch (fl.tag) {
                case ABP_F_TERM_ID:
                        r = val_str(&fl, &m->id);
                        break;
                case ABP_F_ARGV:
                        r = val_str(&fl, &m->argv[m->n_argv]);
                        m->n_argv++;
                        break;
                case ABP_F_ENV:
                        r = val_str(&fl, &m->env[m->n_env]);
                        m->n_env++;
                        break;
                case ABP_F_CWD:
                        r = val_str(&fl, &m->cwd);
                        break;
                case ABP_F_USER:
                        r = val_str(&fl, &m->user);
                        break;
                case ABP_F_COLS:
                        r = val_u32(&fl, &m->cols);
                        break;
                case ABP_F_ROWS:
                        r = val_u32(&fl, &m->rows);
                        break;
                case ABP_F_SIGNAL:
                        r = val_u32(&fl, &m->signal);
                        break;
                case ABP_F_DATA:
                        m->data = fl.val;
                        m->data_len = fl.len;
                        break;
                case ABP_F_PIPES:
                        r = val_bool(&fl, &m->pipes);
                        break;
                case ABP_F_CLOSE_STDIN:
                        r = val_bool(&fl, &m->close_stdin);
                        break;
                case ABP_F_TIMEOUT_MS:
                        r = val_u32(&fl, &m->timeout_ms);
                        break;
                case ABP_F_COMMAND:
                        r = val_str(&fl, &m->command);
                        break;
                case ABP_F_MERGE:
                        r = val_bool(&fl, &m->merge);
                        break;
                case ABP_F_SNAPSHOT:
                        r = val_bool(&fl, &m->snapshot);
                        break;
                case ABP_F_TAG:
                        r = val_str(&fl, &m->tag);
                        break;
                }
        });
        return 0;
}

static bool dim_ok(uint32_t v, bool required)
{
        return v ? v <= ABP_TERM_DIM_MAX : !required;
}

int abp_dec_term_req(const abp_frame *f, abp_term_req *m)
{
        size_t na, ne;
        *m = (abp_term_req){0};
        if (!abp_is_term_request(f->type) || count_lists(f, &na, &ne) < 0)
                return -EBADMSG;
        /* Both counts <= payload / 8, so these allocations are bounded. */
        m->argv = xcalloc(na + 1, sizeof(*m->argv));
        m->env = xcalloc(ne + 1, sizeof(*m->env));
        bool ok = term_req_fields(f, m) == 0;
        bool resize = f->type == ABP_TERM_RESIZE;
        if (ok && f->type != ABP_TERM_OPEN && f->type != ABP_TERM_LIST)
                ok = m->id && strlen(m->id) <= ABP_TERM_ID_MAX;
        if (ok)
                ok = dim_ok(m->cols, resize) && dim_ok(m->rows, resize);
        if (ok && f->type == ABP_TERM_SIGNAL)
                ok = m->signal > 0 && m->signal < 65;
        if (ok && m->tag)
                ok = strlen(m->tag) <= ABP_TERM_TAG_MAX;
        for (size_t i = 0; ok && i < m->n_argv; i++)
                ok = m->argv[i][0] != 0 || i > 0;
        if (!ok) {
                abp_term_req_clear(m);
                return -EBADMSG;
        }
        return 0;
}

static int term_fields(const abp_frame *f, abp_term_info *m, uint32_t *code)
{
        abp_field fl;
        int r = 0;
        FOR_FIELDS(f, fl, r, {
                switch (fl.tag) {
                case ABP_F_TERM_ID:
                        r = val_str(&fl, &m->id);
                        break;
                case ABP_F_ARGV:
                        r = val_str(&fl, &m->argv[m->n_argv]);
                        m->n_argv++;
                        break;
                case ABP_F_COLS:
                        r = val_u32(&fl, &m->cols);
                        break;
                case ABP_F_ROWS:
                        r = val_u32(&fl, &m->rows);
                        break;
                case ABP_F_PID:
                        r = val_u32(&fl, &m->pid);
                        break;
                case ABP_F_CREATED_MS:
                        r = val_u64(&fl, &m->created_ms);
                        break;
                case ABP_F_RUNNING:
                        r = val_bool(&fl, &m->running);
                        break;
                case ABP_F_EXIT_CODE:
                        r = val_u32(&fl, code);
                        m->has_exit = true;
                        break;
                case ABP_F_PIPES:
                        r = val_bool(&fl, &m->pipes);
                        break;
                case ABP_F_TIMED_OUT:
                        r = val_bool(&fl, &m->timed_out);
                        break;
                case ABP_F_ENDED_MS:
                        r = val_u64(&fl, &m->ended_ms);
                        break;
                case ABP_F_LINES:
                        r = val_u64(&fl, &m->lines);
                        break;
                case ABP_F_TAG:
                        r = val_str(&fl, &m->tag);
                        break;
                }
        });
        return 0;
}

int abp_dec_term(const abp_frame *f, abp_term_info *m)
{
        size_t na, ne;
        uint32_t code = 0;
        *m = (abp_term_info){0};
        if (f->type != ABP_TERM || count_lists(f, &na, &ne) < 0)
                return -EBADMSG;
        m->argv = xcalloc(na + 1, sizeof(*m->argv));
        if (term_fields(f, m, &code) < 0 || !m->id || strlen(m->id) > ABP_TERM_ID_MAX ||
            (m->tag && strlen(m->tag) > ABP_TERM_TAG_MAX)) {
                abp_term_info_clear(m);
                return -EBADMSG;
        }
        m->exit_code = (int32_t)code;
        return 0;
}

/* ---- reader ---- */

void abp_reader_free(abp_reader *r)
{
        free(r->p);
        *r = (abp_reader){0};
}

/* Moves unconsumed bytes to the front and grows the buffer (up to one
 * maximal frame) so that at least some space is free. -ENOBUFS when full. */
static int make_room(abp_reader *r)
{
        if (r->start > 0) {
                memmove(r->p, r->p + r->start, r->end - r->start);
                r->end -= r->start;
                r->start = 0;
        }
        if (r->end < r->cap)
                return 0;
        if (r->cap >= READER_MAX)
                return -ENOBUFS;
        /* A small first buffer: most exchanges are a frame or two of a few
         * hundred bytes, and glibc consolidates its fast bins before every
         * allocation of 1 KiB or more (~2.5% of the server's CPU per exec,
         * with the 64 KiB this started at). Large outputs double it. */
        size_t cap = r->cap ? r->cap * 2 : 512;
        if (cap > READER_MAX)
                cap = READER_MAX;
        r->p = xrealloc(r->p, cap);
        r->cap = cap;
        return 0;
}

ssize_t abp_reader_fill(abp_reader *r, int fd)
{
        int k = make_room(r);
        if (k < 0)
                return k;
        for (;;) {
                ssize_t n = read(fd, r->p + r->end, r->cap - r->end);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return -errno;
                r->end += (size_t)n;
                return n;
        }
}

int abp_reader_feed(abp_reader *r, const void *data, size_t len)
{
        const uint8_t *p = data;
        while (len > 0) {
                int k = make_room(r);
                if (k < 0)
                        return k;
                size_t n = r->cap - r->end < len ? r->cap - r->end : len;
                memcpy(r->p + r->end, p, n);
                r->end += n;
                p += n;
                len -= n;
        }
        return 0;
}

int abp_reader_next(abp_reader *r, abp_frame *f)
{
        size_t avail = r->end - r->start;
        if (avail < ABP_HDR_SIZE)
                return 0;
        const uint8_t *h = r->p + r->start;
        uint32_t len = get32(h + 4);
        if (len > ABP_MAX_PAYLOAD)
                return -EBADMSG;
        if (avail - ABP_HDR_SIZE < len)
                return 0;
        f->type = get32(h);
        f->len = len;
        f->payload = h + ABP_HDR_SIZE;
        r->start += ABP_HDR_SIZE + len;
        return 1;
}

bool abp_reader_partial(const abp_reader *r)
{
        return r->end > r->start;
}

/* ---- blocking helpers ---- */

int abp_wait_fd(int fd, short events, int timeout_ms)
{
        struct pollfd p = {.fd = fd, .events = events};
        for (;;) {
                int n = poll(&p, 1, timeout_ms);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return -errno;
                if (n == 0)
                        return -ETIMEDOUT;
                return 0;
        }
}

int abp_send(int fd, abp_buf *b, int timeout_ms)
{
        size_t off = 0;
        int r = 0;
        while (off < b->len) {
                ssize_t n = send(fd, b->p + off, b->len - off, MSG_NOSIGNAL | MSG_DONTWAIT);
                if (n >= 0) {
                        off += (size_t)n;
                        continue;
                }
                if (errno == EINTR)
                        continue;
                if (errno != EAGAIN) {
                        r = -errno;
                        break;
                }
                r = abp_wait_fd(fd, POLLOUT, timeout_ms);
                if (r < 0)
                        break;
        }
        b->len = 0;
        b->frame = 0;
        return r;
}

int abp_recv(int fd, abp_reader *r, abp_frame *f, int timeout_ms)
{
        for (;;) {
                int k = abp_reader_next(r, f);
                if (k < 0)
                        return k;
                if (k > 0)
                        return 0;
                k = abp_wait_fd(fd, POLLIN, timeout_ms);
                if (k < 0)
                        return k;
                ssize_t n = abp_reader_fill(r, fd);
                if (n == -EAGAIN)
                        continue;
                if (n < 0)
                        return (int)n;
                if (n == 0)
                        return -ECONNRESET;
        }
}
