// api.mjs - the console's one way to the API: fetch() with the token in the
// Authorization header (never in a URL), JSON errors as ApiError, and the
// server-sent event stream read with fetch() + ReadableStream (EventSource
// cannot send a header).

const KEY = 'agentbox.token';

// The token of this tab (sessionStorage: gone when the tab closes), '' for a
// server without a token, null when not logged in.
export function getToken() { return sessionStorage.getItem(KEY); }
export function setToken(t) { sessionStorage.setItem(KEY, t); }
export function clearToken() { sessionStorage.removeItem(KEY); }

export class ApiError extends Error {
  constructor(status, code, message, body) {
    super(message);
    this.status = status;
    this.code = code;
    this.body = body;
  }
}

export function authHeaders(extra) {
  const h = new Headers(extra || {});
  const t = getToken();
  if (t) h.set('Authorization', 'Bearer ' + t);
  return h;
}

// Resolves to the fetch Response; throws ApiError for an answer >= 400.
export async function request(method, path, opts = {}) {
  const headers = authHeaders(opts.headers);
  let body = opts.body;
  if (opts.json !== undefined) {
    body = JSON.stringify(opts.json);
    headers.set('Content-Type', 'application/json');
  }
  let resp;
  try {
    resp = await fetch(path, {method, headers, body, signal: opts.signal, cache: 'no-store',
                              credentials: 'omit', redirect: 'error'});
  } catch (e) {
    if (e.name === 'AbortError') throw e;
    throw new ApiError(0, 'network', 'the server did not answer: ' + e.message);
  }
  if (resp.status >= 400) {
    let j = null;
    try { j = await resp.json(); } catch (_) { /* not JSON */ }
    const err = j && j.error ? j.error : {};
    const code = err.code || 'http_' + resp.status;
    const msg = err.message || (j && j.message) || resp.statusText || ('HTTP ' + resp.status);
    if (resp.status === 401) window.dispatchEvent(new CustomEvent('agentbox-unauthorized'));
    throw new ApiError(resp.status, code, msg, j);
  }
  return resp;
}

// JSON answer of a request (null for 204).
export async function api(method, path, opts) {
  const resp = await request(method, path, opts);
  if (resp.status === 204) return null;
  const text = await resp.text();
  return text ? JSON.parse(text) : null;
}

export const get = (path, opts) => api('GET', path, opts);

// Reads GET path as server-sent events until signal aborts; calls onEvent({id,
// type, data, json}) for each. Reconnects after a drop, resuming after the last
// event seen (after=). onState('open'|'closed'|'error', message) reports the link.
export async function streamEvents(path, onEvent, signal, onState) {
  let last = null;
  while (!signal.aborted) {
    try {
      const url = last ? path + (path.includes('?') ? '&' : '?') + 'after=' + encodeURIComponent(last) : path;
      const resp = await request('GET', url, {signal, headers: {Accept: 'text/event-stream'}});
      if (onState) onState('open');
      const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
      let buf = '';
      for (;;) {
        const {value, done} = await reader.read();
        if (done) break;
        buf += value.replace(/\r\n?/g, '\n');
        let cut;
        while ((cut = buf.indexOf('\n\n')) >= 0) {
          const block = buf.slice(0, cut);
          buf = buf.slice(cut + 2);
          const ev = parseEvent(block);
          if (ev) {
            if (ev.id) last = ev.id;
            onEvent(ev);
          }
        }
      }
      if (onState) onState('closed');
    } catch (e) {
      if (signal.aborted || e.name === 'AbortError') return;
      if (onState) onState('error', e.message);
      if (e.status === 401 || e.status === 403) return;
    }
    await new Promise(r => setTimeout(r, 2000));
  }
}

// Sends a request whose answer is a server-sent event stream (POST /api/chat)
// and calls onEvent({id, type, data, json}) for each event until the stream
// ends or signal aborts (which closes it: the server stops the work). Throws
// ApiError when the request is refused.
export async function postEvents(path, json, onEvent, signal) {
  const resp = await request('POST', path, {json, signal, headers: {Accept: 'text/event-stream'}});
  const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = '';
  for (;;) {
    const {value, done} = await reader.read();
    if (done) return;
    buf += value.replace(/\r\n?/g, '\n');
    let cut;
    while ((cut = buf.indexOf('\n\n')) >= 0) {
      const ev = parseEvent(buf.slice(0, cut));
      buf = buf.slice(cut + 2);
      if (ev) onEvent(ev);
    }
  }
}

function parseEvent(block) {
  let type = 'message', id = null;
  const data = [];
  for (const line of block.split('\n')) {
    if (!line || line.startsWith(':')) continue;
    const i = line.indexOf(':');
    const field = i < 0 ? line : line.slice(0, i);
    let value = i < 0 ? '' : line.slice(i + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    if (field === 'event') type = value;
    else if (field === 'data') data.push(value);
    else if (field === 'id') id = value;
  }
  if (!data.length) return null;
  const text = data.join('\n');
  let json = null;
  try { json = JSON.parse(text); } catch (_) { /* not JSON */ }
  return {id, type, data: text, json};
}

// The path of a box file route.
export function filePath(box, path, extra) {
  const q = new URLSearchParams({path, ...(extra || {})});
  return '/v1/sandboxes/' + encodeURIComponent(box) + '/files?' + q.toString();
}
