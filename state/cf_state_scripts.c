/* The Lua scripts of the state library, embedded as string constants so the
 * library never reads files at run time.  Each script runs atomically in
 * Redis: every multi-key change is one script, never a client-side
 * read-modify-write.  Key layout and reply shapes: docs/STATE.md.
 *
 * Scripts cannot share code on the server (SCRIPT LOAD/EVALSHA runs one
 * self-contained chunk), so the helpers below are string macros that the
 * compiler concatenates into each script's single source string: each
 * script defines exactly the helpers it calls.
 *
 * Workspace scripts: KEYS = meta, files, refs, hist of one workspace; the
 * blob strings are named after the meta key (same hash tag).
 * Checkpoint scripts: KEYS = thread meta, thread index; ARGV[1] = prefix of
 * the checkpoint hashes (same hash tag, so same cluster slot). */
#include "cf_state_int.h"

/* Integers as decimal strings (tostring would give 1e+15 style floats). */
#define LUA_FMT \
    "local function fmt(n) return string.format('%d', n) end\n"

#define WS_LUA_KEYS \
    "-- KEYS: 1 meta (hash), 2 files (hash path -> \"size:blobid\"), 3 refs (hash blobid -> references),\n" \
    "--       4 hist (hash rev -> msgpack undo log).  Blob bytes live in strings named\n" \
    "--       <meta key without 'meta'>b:<blobid>, written by the client before the commit.\n" \
    "local bpre = string.sub(KEYS[1], 1, #KEYS[1] - 4) .. 'b:'\n"

/* The server's clock, in microseconds. */
#define WS_LUA_NOW \
    "local function now_us()\n" \
    "  local t = redis.call('TIME')\n" \
    "  return tonumber(t[1]) * 1000000 + tonumber(t[2])\n" \
    "end\n"

/* The workspace's metadata: a table, 'old' for a workspace written before
 * blobs became content-addressed (format 1: the client migrates it), or nil
 * when a field is missing or out of its range (so that no loop below can
 * run away on a damaged hash: rev - oldest_rev never exceeds history). */
#define WS_LUA_LOAD_META \
    "local function load_meta()\n" \
    "  local m = redis.call('HMGET', KEYS[1], 'rev', 'nfiles', 'bytes', 'oldest_rev', 'history', 'ttl_ms',\n" \
    "                       'format', 'touched_us', 'stored', 'hist_bytes', 'path_bytes', 'nblobs', 'acct_rev')\n" \
    "  if m[7] ~= '2' then return 'old' end\n" \
    "  local t = {rev = tonumber(m[1]), nfiles = tonumber(m[2]), bytes = tonumber(m[3]),\n" \
    "             oldest = tonumber(m[4]), history = tonumber(m[5]), ttl = tonumber(m[6]),\n" \
    "             touched = tonumber(m[8] or '0'), stored = tonumber(m[9] or ''),\n" \
    "             hist_bytes = tonumber(m[10] or ''), path_bytes = tonumber(m[11] or ''), nblobs = tonumber(m[12] or ''),\n" \
    "             acct_rev = tonumber(m[13] or '')}\n" \
    "  if not (t.rev and t.nfiles and t.bytes and t.oldest and t.history and t.ttl and t.touched) then return nil end\n" \
    "  if t.rev < 0 or t.oldest < 0 or t.oldest > t.rev or t.history < 0 or t.history > 100000 or\n" \
    "     t.rev - t.oldest > t.history or t.nfiles < 0 or t.bytes < 0 or t.ttl < 0 then return nil end\n" \
    "  return t\n" \
    "end\n"

/* Every key of the workspace shares one TTL, renewed on each access.  Blobs
 * are many keys: they get 1.5 x the TTL and are renewed together only once
 * half a TTL has passed since the last renewal (touched_us), so each stays
 * at least as long as the metadata without an access costing one call per
 * blob.  A new reference renews its blob at once (blob_keep). */
#define WS_LUA_REFRESH \
    WS_LUA_NOW \
    "local function blob_ttl(ttl) return ttl + math.floor(ttl / 2) end\n" \
    "local function blob_keep(ttl, bid)\n" \
    "  if ttl > 0 then redis.call('PEXPIRE', bpre .. bid, blob_ttl(ttl)) else redis.call('PERSIST', bpre .. bid) end\n" \
    "end\n" \
    "local function refresh(m)\n" \
    "  if m.ttl <= 0 then return end\n" \
    "  for i = 1, 4 do redis.call('PEXPIRE', KEYS[i], m.ttl) end\n" \
    "  local now = now_us()\n" \
    "  if now - m.touched > m.ttl * 500 then\n" \
    "    local bt = blob_ttl(m.ttl)\n" \
    "    for _, bid in ipairs(redis.call('HKEYS', KEYS[3])) do redis.call('PEXPIRE', bpre .. bid, bt) end\n" \
    "    redis.call('HSET', KEYS[1], 'touched_us', fmt(now))\n" \
    "  end\n" \
    "end\n"

/* Manifest entry "size:blobid" -> size, blobid. */
#define WS_LUA_PARSE_ENTRY \
    "local function parse_entry(v)\n" \
    "  local sz, bid = string.match(v, '^(%d+):(.+)$')\n" \
    "  if not sz then error({err = 'ERR workspace corrupt: bad manifest entry'}) end\n" \
    "  return tonumber(sz), bid\n" \
    "end\n"

/* Everything a script that reads the files of a workspace calls. */
#define WS_LUA_PRELUDE WS_LUA_KEYS LUA_FMT WS_LUA_LOAD_META WS_LUA_REFRESH WS_LUA_PARSE_ENTRY

/* Start of a script on an existing workspace (needs load_meta): m is its
 * metadata; a missing workspace answers {'notfound'}, one still in format 1
 * {'format'} (the client migrates it and asks again), damaged metadata an
 * error.  Format 2 names the oldest revision `oldest_rev`, not `oldest`:
 * scripts of an older codefleet find no `oldest` and fail before writing
 * anything, instead of mixing their blobs into a migrated workspace. */
#define WS_LUA_OPEN \
    "if redis.call('EXISTS', KEYS[1]) == 0 then return {'notfound'} end\n" \
    "local m = load_meta()\n" \
    "if m == 'old' then return {'format'} end\n" \
    "if not m then return redis.error_reply('ERR workspace corrupt: bad metadata') end\n"

#define CP_LUA_PRELUDE \
    "-- KEYS: 1 thread meta (hash: seq, last_us, n), 2 index (zset id by created_us)\n" \
    "-- ARGV[1]: key prefix of checkpoint hashes (\"<prefix>{cp:<thread>}:c:\")\n" \
    "-- The newest checkpoint's record is also copied to <meta key without 'meta'>latest,\n" \
    "-- so loading it is one plain HMGET.\n" \
    "local pre = ARGV[1]\n" \
    "local latest_key = string.sub(KEYS[1], 1, #KEYS[1] - 4) .. 'latest'\n" \
    "-- The sizes of the thread's checkpoints (id -> bytes) and their sum in the\n" \
    "-- meta's 'held', for its profile's quota (state/cf_quota.c measures it).\n" \
    "local sz_key = string.sub(KEYS[1], 1, #KEYS[1] - 4) .. 'sz'\n" \
    "local function unheld(id)\n" \
    "  local v = tonumber(redis.call('HGET', sz_key, id) or '0') or 0\n" \
    "  if v ~= 0 and redis.call('EXISTS', KEYS[1]) == 1 then redis.call('HINCRBY', KEYS[1], 'held', 0 - v) end\n" \
    "  redis.call('HDEL', sz_key, id)\n" \
    "end\n" \
    "-- held holds while the thread's id counter and index are as it left them\n" \
    "-- (held_n, held_card): after an older codefleet's save or delete, it is\n" \
    "-- counted again from the index (and the sizes rebuilt).\n" \
    "local function held_sync()\n" \
    "  local v = redis.call('HMGET', KEYS[1], 'held', 'held_n', 'held_card', 'n')\n" \
    "  local card = redis.call('ZCARD', KEYS[2])\n" \
    "  if v[1] and v[2] == (v[4] or '0') and tonumber(v[3] or '') == card then return end\n" \
    "  local held = 0\n" \
    "  redis.call('DEL', sz_key)\n" \
    "  for _, id in ipairs(redis.call('ZRANGE', KEYS[2], 0, -1)) do\n" \
    "    if redis.call('EXISTS', pre .. id) == 1 then\n" \
    "      local size = 512 + 3 * #pre + redis.call('HSTRLEN', pre .. id, 'state') + redis.call('HSTRLEN', pre .. id, 'meta')\n" \
    "      redis.call('HSET', sz_key, id, string.format('%d', size))\n" \
    "      held = held + size\n" \
    "    end\n" \
    "  end\n" \
    "  redis.call('HSET', KEYS[1], 'held', string.format('%d', held))\n" \
    "end\n" \
    "local function held_stamp()\n" \
    "  redis.call('HSET', KEYS[1], 'held_n', redis.call('HGET', KEYS[1], 'n') or '0',\n" \
    "             'held_card', string.format('%d', redis.call('ZCARD', KEYS[2])))\n" \
    "end\n"

/* The copy is trusted only while the thread's metadata says nothing changed
 * since it was written: copy_n is the id counter n and copy_card the
 * index's size at that time.  Any save (also by an older codefleet, which
 * knows nothing of the copy) bumps n, any delete shrinks the index. */
#define CP_LUA_NEWEST \
    "local function copy_valid()\n" \
    "  local mm = redis.call('HMGET', KEYS[1], 'n', 'copy_n', 'copy_card')\n" \
    "  return mm[1] and mm[1] == mm[2] and tonumber(mm[3]) == redis.call('ZCARD', KEYS[2])\n" \
    "end\n" \
    "-- Newest checkpoint that still exists (hashes expire on their own TTL):\n" \
    "-- the copy's id when the copy is valid and its record is there, else a\n" \
    "-- walk down the index.\n" \
    "local function newest()\n" \
    "  if copy_valid() then\n" \
    "    local id = redis.call('HGET', latest_key, 'id')\n" \
    "    if id and redis.call('EXISTS', pre .. id) == 1 then return id end\n" \
    "  end\n" \
    "  local off = 0\n" \
    "  while true do\n" \
    "    local ids = redis.call('ZREVRANGE', KEYS[2], off, off + 15)\n" \
    "    if #ids == 0 then return '' end\n" \
    "    for _, i in ipairs(ids) do\n" \
    "      if redis.call('EXISTS', pre .. i) == 1 then return i end\n" \
    "    end\n" \
    "    off = off + #ids\n" \
    "  end\n" \
    "end\n"

/* Makes the latest copy match the newest record again (after a delete, or
 * for a thread saved before the copy existed); needs newest(). */
#define CP_LUA_SYNC_LATEST \
    "local function sync_latest()\n" \
    "  local id = newest()\n" \
    "  redis.call('DEL', latest_key)\n" \
    "  if id == '' then return '' end\n" \
    "  local f = redis.call('HGETALL', pre .. id)\n" \
    "  if #f > 0 then\n" \
    "    redis.call('HSET', latest_key, unpack(f))\n" \
    "    local ttl = redis.call('PTTL', pre .. id)\n" \
    "    if ttl > 0 then redis.call('PEXPIRE', latest_key, ttl) end\n" \
    "    local n = redis.call('HGET', KEYS[1], 'n')\n" \
    "    if n then\n" \
    "      redis.call('HSET', KEYS[1], 'copy_n', n, 'copy_card', redis.call('ZCARD', KEYS[2]))\n" \
    "    end\n" \
    "  end\n" \
    "  return id\n" \
    "end\n"

#define CP_LUA_APPEND_RECORD \
    "-- Appends the 7 record fields of id to out; false if it does not exist.\n" \
    "local function append_record(out, id, with_state)\n" \
    "  local f = redis.call('HMGET', pre .. id, 'id', 'thread', 'parent', with_state and 'state' or 'id',\n" \
    "                       'meta', 'created_us', 'seq')\n" \
    "  if not f[1] then return false end\n" \
    "  if not with_state then f[4] = '' end\n" \
    "  for i = 1, 7 do out[#out + 1] = f[i] or '' end\n" \
    "  return true\n" \
    "end\n"

const cf_redis_script cf_ws_script_create = {
    .name = "ws_create",
    .source =
    WS_LUA_KEYS
    "-- ARGV: 1 project, 2 session, 3 now_us, 4 ttl_ms, 5 history\n"
    "if redis.call('EXISTS', KEYS[1]) == 1 then\n"
    "  return {'exists', redis.call('HGET', KEYS[1], 'rev') or '0'}\n"
    "end\n"
    "-- Leftovers of a workspace whose metadata expired first must not leak in.\n"
    "for _, bid in ipairs(redis.call('HKEYS', KEYS[3])) do redis.call('UNLINK', bpre .. bid) end\n"
    "redis.call('DEL', KEYS[2], KEYS[3], KEYS[4])\n"
    "redis.call('HSET', KEYS[1], 'project', ARGV[1], 'session', ARGV[2], 'created_us', ARGV[3],\n"
    "           'updated_us', ARGV[3], 'rev', '0', 'oldest_rev', '0', 'nfiles', '0', 'bytes', '0',\n"
    "           'history', ARGV[5], 'ttl_ms', ARGV[4], 'format', '2', 'touched_us', '0', 'stored', '0',\n"
    "           'nblobs', '0', 'hist_bytes', '0', 'path_bytes', '0', 'acct_rev', '0')\n"
    "local ttl = tonumber(ARGV[4])\n"
    "if ttl > 0 then redis.call('PEXPIRE', KEYS[1], ttl) end\n"
    "return {'ok', '0'}\n",
};

const cf_redis_script cf_ws_script_commit = {
    .name = "ws_commit",
    .source =
    WS_LUA_PRELUDE
    "-- ARGV: 1 expected_rev (-1 any), 2 now_us, 3 max_files, 4 max_total, 5 max_file, 6 max_path,\n"
    "--       7 nputs, 8 ndels, 9 strict_delete, then nputs paths, nputs sizes, nputs blob ids\n"
    "--       (sha256 hex of the bytes, already stored by the client), ndels paths.\n"
    "-- Everything is validated before the first write: a Lua error after a write\n"
    "-- would leave that write in place.\n"
    "-- KEYS[5] (optional): the writer's guard, which must hold ARGV[#ARGV].\n"
    "if #KEYS > 4 and redis.call('GET', KEYS[5]) ~= ARGV[#ARGV] then return {'fenced'} end\n"
    WS_LUA_OPEN
    "local expected = tonumber(ARGV[1])\n"
    "if expected >= 0 and expected ~= m.rev then return {'conflict', fmt(m.rev)} end\n"
    "local maxf, maxt, maxfile, maxpath = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])\n"
    "local np, nd, strict = tonumber(ARGV[7]), tonumber(ARGV[8]), ARGV[9] == '1'\n"
    "if #ARGV ~= 9 + 3 * np + nd + (#KEYS > 4 and 1 or 0) then\n"
    "  return redis.error_reply('ERR workspace commit: bad argument count')\n"
    "end\n"
    "local function badpath(p)\n"
    "  if #p == 0 or #p > maxpath then return true end\n"
    "  if string.byte(p, 1) == 47 or string.byte(p, #p) == 47 then return true end\n"
    "  if string.find(p, '\\0', 1, true) or string.find(p, '//', 1, true) then return true end\n"
    "  for comp in string.gmatch(p, '[^/]+') do\n"
    "    if comp == '..' or comp == '.' then return true end\n"
    "  end\n"
    "  return false\n"
    "end\n"
    "local seen, dels, puts = {}, {}, {}\n"
    "local newn, newb = m.nfiles, m.bytes\n"
    "for i = 1, nd do\n"
    "  local p = ARGV[9 + 3 * np + i]\n"
    "  if badpath(p) or seen[p] then return {'invalid', p} end\n"
    "  seen[p] = true\n"
    "  local old = redis.call('HGET', KEYS[2], p)\n"
    "  if old then\n"
    "    local sz = parse_entry(old)\n"
    "    newn, newb = newn - 1, newb - sz\n"
    "    dels[#dels + 1] = {p, old}\n"
    "  elseif strict then\n"
    "    return {'nofile', p}\n"
    "  end\n"
    "end\n"
    "for i = 1, np do\n"
    "  local p, sz, bid = ARGV[9 + i], tonumber(ARGV[9 + np + i]), ARGV[9 + 2 * np + i]\n"
    "  if badpath(p) or seen[p] then return {'invalid', p} end\n"
    "  seen[p] = true\n"
    "  if not sz or sz < 0 or sz ~= math.floor(sz) or #bid ~= 64 or string.find(bid, '[^0-9a-f]') then\n"
    "    return {'invalid', p}\n"
    "  end\n"
    "  if sz > maxfile then return {'limit', 'file', p} end\n"
    "  -- The bytes must be there now (an upload whose grace ran out is sent again).\n"
    "  local have = redis.call('STRLEN', bpre .. bid)\n"
    "  if have ~= sz or (sz == 0 and redis.call('EXISTS', bpre .. bid) == 0) then return {'missing', bid} end\n"
    "  local old = redis.call('HGET', KEYS[2], p)\n"
    "  if old then\n"
    "    local osz = parse_entry(old)\n"
    "    newb = newb - osz\n"
    "  else\n"
    "    newn = newn + 1\n"
    "  end\n"
    "  newb = newb + sz\n"
    "  puts[#puts + 1] = {p, string.format('%d:%s', sz, bid), old, bid, sz}\n"
    "end\n"
    "if newn > maxf then return {'limit', 'files', fmt(newn)} end\n"
    "if newb > maxt then return {'limit', 'bytes', fmt(newb)} end\n"
    "-- What the workspace holds, for its profile's quota (state/cf_quota.c\n"
    "-- measures it from these): stored, the bytes of the distinct blobs the\n"
    "-- manifest and the retained history reference, and nblobs their number;\n"
    "-- hist_bytes, the undo logs' bytes; path_bytes, the manifest's paths.\n"
    "-- They hold for revision acct_rev: counted again when another revision\n"
    "-- is current (written before they were kept, or by an older codefleet).\n"
    "local stored, nblobs, hist_bytes, path_bytes = m.stored, m.nblobs, m.hist_bytes, m.path_bytes\n"
    "if not (stored and nblobs and hist_bytes and path_bytes) or m.acct_rev ~= m.rev then\n"
    "  stored, nblobs, hist_bytes, path_bytes = 0, 0, 0, 0\n"
    "  for _, bid in ipairs(redis.call('HKEYS', KEYS[3])) do\n"
    "    stored = stored + redis.call('STRLEN', bpre .. bid)\n"
    "    nblobs = nblobs + 1\n"
    "  end\n"
    "  for _, r in ipairs(redis.call('HKEYS', KEYS[4])) do hist_bytes = hist_bytes + redis.call('HSTRLEN', KEYS[4], r) end\n"
    "  for _, p in ipairs(redis.call('HKEYS', KEYS[2])) do path_bytes = path_bytes + #p end\n"
    "end\n"
    "if #dels == 0 and #puts == 0 then\n"
    "  refresh(m)\n"
    "  return {'ok', fmt(m.rev)}\n"
    "end\n"
    "local nrev = m.rev + 1\n"
    "-- Retention, still without writing: revision r stays reconstructible while\n"
    "-- the undo logs of r+1..rev exist.  Dropping undo log r makes r-1\n"
    "-- unreachable: the entries it holds lose their reference (dec).  Every\n"
    "-- count this commit changes must be a number before anything is written.\n"
    "local drop, dec = {}, {}\n"
    "local oldest = m.oldest\n"
    "while oldest < nrev - m.history do\n"
    "  local r = oldest + 1\n"
    "  local u = redis.call('HGET', KEYS[4], fmt(r))\n"
    "  if u then\n"
    "    local t = cmsgpack.unpack(u)\n"
    "    for j = 2, #t, 2 do\n"
    "      if t[j] ~= '-' then\n"
    "        local _, bid = parse_entry(t[j])\n"
    "        dec[bid] = (dec[bid] or 0) + 1\n"
    "      end\n"
    "    end\n"
    "    drop[#drop + 1] = fmt(r)\n"
    "  end\n"
    "  oldest = r\n"
    "end\n"
    "local function counted(bid)\n"
    "  local v = redis.call('HGET', KEYS[3], bid)\n"
    "  if v and not tonumber(v) then error({err = 'ERR workspace corrupt: bad reference count'}) end\n"
    "end\n"
    "for _, pt in ipairs(puts) do counted(pt[4]) end\n"
    "for bid in pairs(dec) do counted(bid) end\n"
    "-- Writes.  References: every entry of the manifest and of the retained\n"
    "-- undo logs counts one.  An entry leaving the manifest moves to this\n"
    "-- revision's undo log, so only new entries add one.\n"
    "local undo = {}\n"
    "for _, d in ipairs(dels) do\n"
    "  redis.call('HDEL', KEYS[2], d[1])\n"
    "  path_bytes = path_bytes - #d[1]\n"
    "  undo[#undo + 1] = d[1]; undo[#undo + 1] = d[2]\n"
    "end\n"
    "for _, pt in ipairs(puts) do\n"
    "  redis.call('HSET', KEYS[2], pt[1], pt[2])\n"
    "  if redis.call('HINCRBY', KEYS[3], pt[4], 1) == 1 then stored, nblobs = stored + pt[5], nblobs + 1 end\n"
    "  if not pt[3] then path_bytes = path_bytes + #pt[1] end\n"
    "  blob_keep(m.ttl, pt[4])\n"
    "  undo[#undo + 1] = pt[1]; undo[#undo + 1] = pt[3] or '-'\n"
    "end\n"
    "local packed = cmsgpack.pack(undo)\n"
    "redis.call('HSET', KEYS[4], fmt(nrev), packed)\n"
    "hist_bytes = hist_bytes + #packed\n"
    "for _, r in ipairs(drop) do\n"
    "  hist_bytes = hist_bytes - redis.call('HSTRLEN', KEYS[4], r)\n"
    "  redis.call('HDEL', KEYS[4], r)\n"
    "end\n"
    "for bid, n in pairs(dec) do\n"
    "  if redis.call('HINCRBY', KEYS[3], bid, -n) <= 0 then\n"
    "    redis.call('HDEL', KEYS[3], bid)\n"
    "    stored, nblobs = stored - redis.call('STRLEN', bpre .. bid), nblobs - 1\n"
    "    redis.call('UNLINK', bpre .. bid)\n"
    "  end\n"
    "end\n"
    "local function pos(n) if n < 0 then return 0 end return n end\n"
    "redis.call('HSET', KEYS[1], 'rev', fmt(nrev), 'nfiles', fmt(newn), 'bytes', fmt(newb),\n"
    "           'oldest_rev', fmt(oldest), 'updated_us', ARGV[2], 'stored', fmt(pos(stored)),\n"
    "           'nblobs', fmt(pos(nblobs)), 'hist_bytes', fmt(pos(hist_bytes)), 'path_bytes', fmt(pos(path_bytes)),\n"
    "           'acct_rev', fmt(nrev))\n"
    "refresh(m)\n"
    "return {'ok', fmt(nrev)}\n",
};

const cf_redis_script cf_ws_script_get = {
    .name = "ws_get",
    .source =
    WS_LUA_PRELUDE
    "-- ARGV: 1 path.  Returns {'ok', rev, content, blob id} | {'nofile', rev} | {'notfound'} | {'format'}\n"
    WS_LUA_OPEN
    "refresh(m)\n"
    "local v = redis.call('HGET', KEYS[2], ARGV[1])\n"
    "if not v then return {'nofile', fmt(m.rev)} end\n"
    "local sz, bid = parse_entry(v)\n"
    "local c = redis.call('GET', bpre .. bid)\n"
    "if not c or #c ~= sz then return redis.error_reply('ERR workspace corrupt: missing or short blob') end\n"
    "return {'ok', fmt(m.rev), c, bid}\n",
};

const cf_redis_script cf_ws_script_info = {
    .name = "ws_info",
    .source =
    WS_LUA_KEYS
    LUA_FMT
    WS_LUA_LOAD_META
    WS_LUA_REFRESH
    "-- Returns {'ok', field, value, ...} of the metadata hash, or {'notfound'} | {'format'}\n"
    WS_LUA_OPEN
    "refresh(m)\n"
    "local out = {'ok'}\n"
    "local all = redis.call('HGETALL', KEYS[1])\n"
    "for i = 1, #all do out[#out + 1] = all[i] end\n"
    "return out\n",
};

const cf_redis_script cf_ws_script_snapshot = {
    .name = "ws_snapshot",
    .source =
    WS_LUA_PRELUDE
    "-- ARGV: 1 revision (-1 = current), 2 with_content ('1'/'0')\n"
    "-- Returns {'ok', rev, current_rev, path, size, blob id, [content], ...} sorted by\n"
    "-- path, or {'gone', oldest} / {'future', rev} / {'notfound'} / {'format'}.\n"
    "-- Without content the client reads the bytes with plain GETs (blobs never\n"
    "-- change); with content (its fallback when a commit trimmed the revision\n"
    "-- between the two) the whole snapshot is one atomic read.\n"
    WS_LUA_OPEN
    "local want = tonumber(ARGV[1])\n"
    "if want < 0 then want = m.rev end\n"
    "if want > m.rev then return {'future', fmt(m.rev)} end\n"
    "if want < m.oldest then return {'gone', fmt(m.oldest)} end\n"
    "local man = {}\n"
    "local flat = redis.call('HGETALL', KEYS[2])\n"
    "for i = 1, #flat, 2 do man[flat[i]] = flat[i + 1] end\n"
    "for r = m.rev, want + 1, -1 do\n"
    "  local u = redis.call('HGET', KEYS[4], fmt(r))\n"
    "  if not u then return redis.error_reply('ERR workspace corrupt: missing undo log') end\n"
    "  local t = cmsgpack.unpack(u)\n"
    "  for j = 1, #t, 2 do\n"
    "    if t[j + 1] == '-' then man[t[j]] = nil else man[t[j]] = t[j + 1] end\n"
    "  end\n"
    "end\n"
    "local paths = {}\n"
    "for p in pairs(man) do paths[#paths + 1] = p end\n"
    "table.sort(paths)\n"
    "local withc = ARGV[2] == '1'\n"
    "local out = {'ok', fmt(want), fmt(m.rev)}\n"
    "for _, p in ipairs(paths) do\n"
    "  local sz, bid = parse_entry(man[p])\n"
    "  out[#out + 1] = p\n"
    "  out[#out + 1] = fmt(sz)\n"
    "  out[#out + 1] = bid\n"
    "  if withc then\n"
    "    local c = redis.call('GET', bpre .. bid)\n"
    "    if not c or #c ~= sz then return redis.error_reply('ERR workspace corrupt: missing or short blob') end\n"
    "    out[#out + 1] = c\n"
    "  end\n"
    "end\n"
    "refresh(m)\n"
    "return out\n",
};

const cf_redis_script cf_ws_script_delete = {
    .name = "ws_delete",
    .source =
    WS_LUA_KEYS
    "-- KEYS[5]: the blob hash of format 1.  Returns 1 if the workspace existed.\n"
    "-- UNLINK frees big values off the main thread.\n"
    "local existed = redis.call('EXISTS', KEYS[1])\n"
    "for _, bid in ipairs(redis.call('HKEYS', KEYS[3])) do redis.call('UNLINK', bpre .. bid) end\n"
    "redis.call('UNLINK', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5])\n"
    "return existed\n",
};

const cf_redis_script cf_ws_script_migrate = {
    .name = "ws_migrate",
    .source =
    WS_LUA_KEYS
    LUA_FMT
    WS_LUA_NOW
    WS_LUA_PARSE_ENTRY
    "-- KEYS[5]: the blob hash of format 1 (blob id -> bytes, ids '<rev>.<n>').\n"
    "-- Moves a format-1 workspace to format 2 in place: each blob its manifest\n"
    "-- or retained undo logs name becomes a blob string under its old id, with\n"
    "-- its reference count.  Returns {'ok'} | {'notfound'}.\n"
    "if redis.call('EXISTS', KEYS[1]) == 0 then return {'notfound'} end\n"
    "if redis.call('HGET', KEYS[1], 'format') == '2' then return {'ok'} end\n"
    "local mm = redis.call('HMGET', KEYS[1], 'ttl_ms', 'rev', 'oldest', 'history')\n"
    "local ttl, rev, oldest, history = tonumber(mm[1] or ''), tonumber(mm[2] or ''), tonumber(mm[3] or ''),\n"
    "                                  tonumber(mm[4] or '')\n"
    "if not (ttl and rev and oldest and history) or ttl < 0 or oldest < 0 or oldest > rev or history < 0 or\n"
    "   rev - oldest > history then\n"
    "  return redis.error_reply('ERR workspace corrupt: bad metadata')\n"
    "end\n"
    "local refs = {}\n"
    "local function add(v)\n"
    "  if v ~= '-' then\n"
    "    local _, bid = parse_entry(v)\n"
    "    refs[bid] = (refs[bid] or 0) + 1\n"
    "  end\n"
    "end\n"
    "for _, v in ipairs(redis.call('HVALS', KEYS[2])) do add(v) end\n"
    "for _, u in ipairs(redis.call('HVALS', KEYS[4])) do\n"
    "  local t = cmsgpack.unpack(u)\n"
    "  for j = 2, #t, 2 do add(t[j]) end\n"
    "end\n"
    "for bid in pairs(refs) do\n"
    "  if redis.call('HEXISTS', KEYS[5], bid) == 0 then\n"
    "    return redis.error_reply('ERR workspace corrupt: missing blob')\n"
    "  end\n"
    "end\n"
    "for bid, n in pairs(refs) do\n"
    "  redis.call('SET', bpre .. bid, redis.call('HGET', KEYS[5], bid))\n"
    "  if ttl > 0 then redis.call('PEXPIRE', bpre .. bid, ttl + math.floor(ttl / 2)) end\n"
    "  redis.call('HSET', KEYS[3], bid, fmt(n))\n"
    "end\n"
    "redis.call('UNLINK', KEYS[5])\n"
    "redis.call('HSET', KEYS[1], 'format', '2', 'touched_us', fmt(now_us()), 'oldest_rev', fmt(oldest))\n"
    "redis.call('HDEL', KEYS[1], 'oldest')\n"
    "if ttl > 0 then for i = 1, 4 do redis.call('PEXPIRE', KEYS[i], ttl) end end\n"
    "return {'ok'}\n",
};

const cf_redis_script cf_ws_script_unupload = {
    .name = "ws_unupload",
    .source =
    WS_LUA_KEYS
    "-- ARGV: blob ids this client created for a commit that did not land.\n"
    "-- Each is removed unless something references it by now (another\n"
    "-- writer's commit of the same bytes).  Returns how many were removed.\n"
    "local n = 0\n"
    "for i = 1, #ARGV do\n"
    "  if redis.call('HEXISTS', KEYS[3], ARGV[i]) == 0 then n = n + redis.call('UNLINK', bpre .. ARGV[i]) end\n"
    "end\n"
    "return n\n",
};

const cf_redis_script cf_ws_script_referenced = {
    .name = "ws_referenced",
    .source =
    "-- KEYS[1]: the refs hash.  ARGV: blob ids.  Returns, for each, 1 when the\n"
    "-- workspace already references it (its bytes are stored), else 0.\n"
    "local out = {}\n"
    "for i = 1, #ARGV do out[i] = redis.call('HEXISTS', KEYS[1], ARGV[i]) end\n"
    "return out\n",
};

const cf_redis_script cf_cp_script_save = {
    .name = "cp_save",
    .source =
    CP_LUA_PRELUDE
    LUA_FMT
    CP_LUA_NEWEST
    "-- ARGV: 1 prefix, 2 thread, 3 mode ('save'|'rollback'), 4 parent_mode ('latest'|'id'|'none'),\n"
    "--       5 parent or rollback target id, 6 expect_mode ('any'|'id'), 7 expected latest ('' = empty),\n"
    "--       8 writer seq (0 = none), 9 state, 10 meta, 11 max count (0 = unlimited), 12 ttl_ms (0 = none)\n"
    "-- KEYS[3] (optional): the writer's guard, which must hold ARGV[13].\n"
    "-- Returns {'ok', id, parent, created_us} | {'stale', stored_seq} | {'conflict', latest} | {'notfound', id}\n"
    "--         | {'fenced'}\n"
    "-- Few calls: this runs on every save.\n"
    "if #KEYS > 2 and redis.call('GET', KEYS[3]) ~= ARGV[13] then return {'fenced'} end\n"
    "local tm = redis.call('HMGET', KEYS[1], 'seq', 'last_us', 'n')\n"
    "local seq, last, n = tonumber(tm[1] or '0'), tonumber(tm[2] or '0'), tonumber(tm[3] or '0')\n"
    "if not (seq and last and n) then return redis.error_reply('ERR checkpoint thread corrupt: bad metadata') end\n"
    "local wseq = tonumber(ARGV[8])\n"
    "if wseq > 0 and wseq < seq then return {'stale', fmt(seq)} end\n"
    "local latest = ''\n"
    "if ARGV[6] == 'id' or (ARGV[3] ~= 'rollback' and ARGV[4] == 'latest') then latest = newest() end\n"
    "if ARGV[6] == 'id' and ARGV[7] ~= latest then return {'conflict', latest} end\n"
    "local parent, state, cmeta = '', ARGV[9], ARGV[10]\n"
    "if ARGV[3] == 'rollback' then\n"
    "  local t = redis.call('HMGET', pre .. ARGV[5], 'state', 'meta')\n"
    "  if not t[1] then return {'notfound', ARGV[5]} end\n"
    "  state, cmeta, parent = t[1], t[2] or '', ARGV[5]\n"
    "elseif ARGV[4] == 'latest' then\n"
    "  parent = latest\n"
    "elseif ARGV[4] == 'id' then\n"
    "  if redis.call('EXISTS', pre .. ARGV[5]) == 0 then return {'notfound', ARGV[5]} end\n"
    "  parent = ARGV[5]\n"
    "end\n"
    "-- One clock (the server's) for every writer; never step backwards, so ids\n"
    "-- (16-digit microseconds + per-thread counter) sort in creation order.\n"
    "local t = redis.call('TIME')\n"
    "local now = tonumber(t[1]) * 1000000 + tonumber(t[2])\n"
    "if now < last then now = last end\n"
    "n = n + 1\n"
    "local id = string.format('%016d-%012d', now, n)\n"
    "local key = pre .. id\n"
    "local rec = {'id', id, 'thread', ARGV[2], 'parent', parent, 'state', state, 'meta', cmeta,\n"
    "             'created_us', fmt(now), 'seq', fmt(wseq)}\n"
    "held_sync()\n"
    "redis.call('HSET', key, unpack(rec))\n"
    "redis.call('HSET', latest_key, unpack(rec))\n"
    "redis.call('ZADD', KEYS[2], fmt(now), id)\n"
    "local size = 512 + 3 * #pre + #state + #cmeta\n"
    "redis.call('HSET', sz_key, id, fmt(size))\n"
    "redis.call('HINCRBY', KEYS[1], 'held', size)\n"
    "local maxc, ttl = tonumber(ARGV[11]), tonumber(ARGV[12])\n"
    "if maxc > 0 then\n"
    "  local cnt = redis.call('ZCARD', KEYS[2])\n"
    "  if cnt > maxc then\n"
    "    local old = redis.call('ZRANGE', KEYS[2], 0, cnt - maxc - 1)\n"
    "    for _, o in ipairs(old) do redis.call('UNLINK', pre .. o); unheld(o) end\n"
    "    redis.call('ZREMRANGEBYRANK', KEYS[2], 0, cnt - maxc - 1)\n"
    "  end\n"
    "end\n"
    "if ttl > 0 then\n"
    "  local cutoff = now - ttl * 1000\n"
    "  local first = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')\n"
    "  if first[2] and tonumber(first[2]) < cutoff then\n"
    "    local old = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', '(' .. fmt(cutoff))\n"
    "    for _, o in ipairs(old) do redis.call('UNLINK', pre .. o); unheld(o) end\n"
    "    redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', '(' .. fmt(cutoff))\n"
    "  end\n"
    "end\n"
    "redis.call('HSET', KEYS[1], 'last_us', fmt(now), 'n', fmt(n), 'seq', fmt(wseq > seq and wseq or seq),\n"
    "           'copy_n', fmt(n), 'copy_card', redis.call('ZCARD', KEYS[2]))\n"
    "if ttl > 0 then\n"
    "  redis.call('PEXPIRE', key, ttl)\n"
    "  redis.call('PEXPIRE', latest_key, ttl)\n"
    "  redis.call('PEXPIRE', KEYS[1], ttl)\n"
    "  redis.call('PEXPIRE', KEYS[2], ttl)\n"
    "  redis.call('PEXPIRE', sz_key, ttl)\n"
    "end\n"
    "held_stamp()\n"
    "return {'ok', id, parent, fmt(now)}\n",
};

const cf_redis_script cf_cp_script_latest = {
    .name = "cp_latest",
    .source =
    CP_LUA_PRELUDE
    CP_LUA_NEWEST
    CP_LUA_APPEND_RECORD
    CP_LUA_SYNC_LATEST
    "-- ARGV: 1 prefix.  Returns {'ok', 7 fields} | {'none'}.  The client reads the\n"
    "-- copy first; this runs when there is none, and makes it.\n"
    "local id = sync_latest()\n"
    "local out = {'ok'}\n"
    "if id == '' or not append_record(out, id, true) then return {'none'} end\n"
    "return out\n",
};

const cf_redis_script cf_cp_script_list = {
    .name = "cp_list",
    .source =
    CP_LUA_PRELUDE
    CP_LUA_APPEND_RECORD
    "-- ARGV: 1 prefix, 2 max score ('+inf' or '(us'), 3 min score ('-inf' or '(us'), 4 limit, 5 with_state\n"
    "-- Returns {'ok', 7 fields per record...}, newest first\n"
    "local limit, with_state = tonumber(ARGV[4]), ARGV[5] == '1'\n"
    "local out, found, off = {'ok'}, 0, 0\n"
    "while found < limit do\n"
    "  local ids = redis.call('ZREVRANGEBYSCORE', KEYS[2], ARGV[2], ARGV[3], 'LIMIT', off, limit)\n"
    "  if #ids == 0 then break end\n"
    "  for _, id in ipairs(ids) do\n"
    "    if append_record(out, id, with_state) then\n"
    "      found = found + 1\n"
    "      if found >= limit then break end\n"
    "    end\n"
    "  end\n"
    "  off = off + #ids\n"
    "end\n"
    "return out\n",
};

const cf_redis_script cf_cp_script_history = {
    .name = "cp_history",
    .source =
    CP_LUA_PRELUDE
    CP_LUA_NEWEST
    CP_LUA_APPEND_RECORD
    "-- ARGV: 1 prefix, 2 start id ('' = latest), 3 limit, 4 with_state\n"
    "-- Returns {'ok', 7 fields per record...} from start towards the root | {'notfound'}\n"
    "local cur = ARGV[2]\n"
    "if cur == '' then cur = newest() elseif redis.call('EXISTS', pre .. cur) == 0 then return {'notfound'} end\n"
    "local limit, with_state = tonumber(ARGV[3]), ARGV[4] == '1'\n"
    "local out, n = {'ok'}, 0\n"
    "while cur ~= '' and n < limit do\n"
    "  if not append_record(out, cur, with_state) then break end\n"
    "  n = n + 1\n"
    "  cur = out[#out - 4] -- the parent field of the record just appended\n"
    "end\n"
    "return out\n",
};

const cf_redis_script cf_cp_script_delete = {
    .name = "cp_delete",
    .source =
    CP_LUA_PRELUDE
    CP_LUA_NEWEST
    CP_LUA_SYNC_LATEST
    "-- ARGV: 1 prefix, 2 id.  Returns 1 if it existed.\n"
    "local valid = copy_valid()\n"
    "local existed = redis.call('EXISTS', pre .. ARGV[2])\n"
    "local synced = redis.call('EXISTS', KEYS[1]) == 1\n"
    "if synced then held_sync() end\n"
    "local z = redis.call('ZREM', KEYS[2], ARGV[2])\n"
    "redis.call('UNLINK', pre .. ARGV[2])\n"
    "unheld(ARGV[2])\n"
    "if redis.call('HGET', latest_key, 'id') == ARGV[2] or not valid then\n"
    "  sync_latest()\n"
    "elseif z == 1 then\n"
    "  redis.call('HSET', KEYS[1], 'copy_card', redis.call('ZCARD', KEYS[2]))\n"
    "end\n"
    "if synced and redis.call('EXISTS', KEYS[1]) == 1 then held_stamp() end\n"
    "if existed == 1 or z == 1 then return 1 end\n"
    "return 0\n",
};

const cf_redis_script cf_cp_script_delete_thread = {
    .name = "cp_delete_thread",
    .source =
    CP_LUA_PRELUDE
    "-- ARGV: 1 prefix.  Returns the number of checkpoint entries removed, -1 if the thread did not exist.\n"
    "local existed = redis.call('EXISTS', KEYS[1]) + redis.call('EXISTS', KEYS[2])\n"
    "local ids = redis.call('ZRANGE', KEYS[2], 0, -1)\n"
    "for _, id in ipairs(ids) do redis.call('UNLINK', pre .. id) end\n"
    "redis.call('UNLINK', KEYS[1], KEYS[2], latest_key, sz_key)\n"
    "if existed == 0 then return -1 end\n"
    "return #ids\n",
};
