// chat.mjs - try the agent: a session (POST /api/sessions), messages to it
// (POST /api/chat/{thread}, read as server-sent events: text, tool calls and
// their results, errors, the usage), uploads into the thread's box
// (/mnt/user-data/uploads) and downloads from it. The thread of this tab is
// kept in sessionStorage; "New session" starts another.
import {api, postEvents, request} from './api.mjs';
import {errText} from './app.mjs';
import {field, fill, h, toast} from './dom.mjs';

const KEY = 'agentbox.chat.thread';

export async function render(main, args, signal) {
  let thread = sessionStorage.getItem(KEY);
  let running = null; // AbortController of the turn in flight
  const who = h('span', {id: 'chat-thread', class: 'muted'});
  const log = h('div', {id: 'chat-log', class: 'chat-log', 'aria-live': 'polite'});
  const input = h('textarea', {name: 'message', id: 'chat-input', rows: 3,
                               placeholder: 'Ask the agent to do something in its box'});
  const send = h('button', {type: 'submit', id: 'chat-send'}, 'Send');
  const stop = h('button', {type: 'button', id: 'chat-stop', hidden: true}, 'Stop');
  const usage = h('p', {id: 'chat-usage', class: 'muted'});
  const newBtn = h('button', {type: 'button', id: 'chat-new'}, 'New session');
  const file = h('input', {type: 'file', id: 'chat-file', multiple: true});
  const dlPath = h('input', {type: 'text', id: 'chat-dl-path', value: 'outputs/',
                             spellcheck: 'false'});
  const dlBtn = h('button', {type: 'button', id: 'chat-dl'}, 'Download');

  function showThread() {
    fill(who, thread ? 'Session ' + thread : 'No session yet: one is made with your first message.');
  }
  async function newSession() {
    const j = await api('POST', '/api/sessions', {json: {}, signal});
    thread = j.thread_id;
    sessionStorage.setItem(KEY, thread);
    fill(log);
    fill(usage);
    showThread();
    return thread;
  }
  function bubble(cls, ...children) {
    const el = h('div', {class: 'msg ' + cls}, ...children);
    log.append(el);
    el.scrollIntoView({block: 'end'});
    return el;
  }

  async function turn(message) {
    if (!thread) await newSession();
    bubble('user', message);
    let text = null; // the assistant's text element of the current step
    running = new AbortController();
    const both = AbortSignal.any ? AbortSignal.any([signal, running.signal]) : running.signal;
    send.disabled = true;
    stop.hidden = false;
    try {
      await postEvents('/api/chat/' + encodeURIComponent(thread), {message}, ev => {
        const d = ev.json || {};
        if (ev.type === 'text') {
          if (!text) text = bubble('assistant', '');
          text.textContent += d.delta || '';
        } else if (ev.type === 'tool_call') {
          text = null;
          bubble('tool-call', h('details', {},
            h('summary', {}, 'Tool ' + d.name),
            h('pre', {class: 'text'}, JSON.stringify(d.arguments, null, 2))));
        } else if (ev.type === 'tool_result') {
          bubble('tool-result' + (d.is_error ? ' bad' : ''), h('details', {},
            h('summary', {}, (d.is_error ? 'Error from ' : 'Result of ') + d.name),
            h('pre', {class: 'text'}, d.output || '')));
        } else if (ev.type === 'error') {
          text = null;
          bubble('error', h('span', {role: 'alert'}, 'Error: ' + (d.message || ev.data) +
                            (d.status ? ' (model HTTP ' + d.status + ')' : '')));
        } else if (ev.type === 'done') {
          const u = d.usage || {};
          fill(usage, 'Ended: ' + d.stop + ' after ' + d.steps + ' model call(s); tokens: ' +
               (u.prompt_tokens || 0) + ' in, ' + (u.completion_tokens || 0) + ' out.');
        }
      }, both);
    } catch (e) {
      if (e.name !== 'AbortError') bubble('error', h('span', {role: 'alert'}, errText(e)));
      else if (!signal.aborted) bubble('error', 'Stopped.');
    } finally {
      running = null;
      send.disabled = false;
      stop.hidden = true;
    }
  }

  const form = h('form', {class: 'chat-form'}, field('Message (Ctrl+Enter sends)', input), send, stop);
  form.addEventListener('submit', ev => {
    ev.preventDefault();
    const m = input.value.trim();
    if (!m || running) return;
    input.value = '';
    turn(m);
  });
  input.addEventListener('keydown', ev => {
    if (ev.key === 'Enter' && (ev.ctrlKey || ev.metaKey)) { ev.preventDefault(); form.requestSubmit(); }
  });
  stop.addEventListener('click', () => running && running.abort());
  newBtn.addEventListener('click', () => newSession().catch(e => toast(errText(e), true)));
  file.addEventListener('change', async () => {
    if (!file.files.length) return;
    try {
      if (!thread) await newSession();
      const fd = new FormData();
      for (const f of file.files) fd.append('file', f, f.name);
      const resp = await request('POST', '/api/files/' + encodeURIComponent(thread) + '/upload',
                                 {body: fd, signal});
      const j = await resp.json();
      toast('Uploaded ' + j.files.map(f => f.path).join(', '));
      bubble('note', 'Uploaded: ' + j.files.map(f => f.path).join(', '));
    } catch (e) {
      toast(errText(e), true);
    }
    file.value = '';
  });
  dlBtn.addEventListener('click', async () => {
    if (!thread) return toast('No session yet', true);
    try {
      const q = new URLSearchParams({path: dlPath.value.trim()});
      const resp = await request('GET', '/api/files/' + encodeURIComponent(thread) + '/download?' + q, {signal});
      const url = URL.createObjectURL(await resp.blob());
      const a = h('a', {href: url, download: dlPath.value.split('/').pop() || 'download'});
      document.body.append(a);
      a.click();
      a.remove();
      setTimeout(() => URL.revokeObjectURL(url), 10000);
    } catch (e) {
      toast(errText(e), true);
    }
  });
  signal.addEventListener('abort', () => running && running.abort());
  showThread();
  main.append(h('h1', {}, 'Chat'),
    h('p', {class: 'muted'}, 'An agent over the configured model (llm: in the config file), ' +
      'running its tools in this session\'s box (POST /api/chat).'),
    h('div', {class: 'chat-bar'}, who, newBtn),
    log, form, usage,
    h('div', {class: 'chat-files'}, field('Upload into /mnt/user-data/uploads', file),
      field('Download (relative to /mnt/user-data)', dlPath), dlBtn));
}
