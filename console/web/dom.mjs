// dom.mjs - building elements safely. Every string given as a child becomes a
// text node (never parsed as HTML): whatever a box wrote (file names, output,
// event text) is shown as text. Nothing in the console uses innerHTML.

// h('tag', {attr: value, on: {click: fn}, class: 'x'}, child, ...)
export function h(tag, attrs, ...children) {
  if (attrs instanceof Node || typeof attrs === 'string' || Array.isArray(attrs)) {
    children.unshift(attrs);
    attrs = null;
  }
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'on') {
      for (const [ev, fn] of Object.entries(v)) el.addEventListener(ev, fn);
    } else if (k === 'class') {
      el.className = v;
    } else if (k === 'style') {
      throw new Error('inline styles are not allowed (CSP): use a class');
    } else if (k === 'value') {
      el.value = v;
    } else if (k === 'checked' || k === 'disabled' || k === 'hidden' || k === 'selected' ||
               k === 'multiple' || k === 'required') {
      el[k] = !!v;
    } else {
      el.setAttribute(k, v === true ? '' : String(v));
    }
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

// Replaces el's children.
export function fill(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

export function fmtBytes(n) {
  if (n === null || n === undefined || n < 0) return '–';
  const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(n < 10 ? 1 : 0) : String(n)) + ' ' + u[i];
}

export function fmtTime(ms) {
  if (!ms) return '–';
  const d = new Date(ms);
  return d.toLocaleString(undefined, {hour12: false});
}

export function fmtAgo(ms) {
  if (!ms) return '–';
  const s = Math.max(0, Math.round((Date.now() - ms) / 1000));
  if (s < 60) return s + ' s ago';
  if (s < 3600) return Math.round(s / 60) + ' min ago';
  if (s < 86400) return Math.round(s / 3600) + ' h ago';
  return Math.round(s / 86400) + ' d ago';
}

export function badge(status) {
  return h('span', {class: 'badge st-' + String(status).replace(/[^a-z]/g, '')}, status);
}

let toastTimer = null;
// A short message in the live region (screen readers announce it).
export function toast(msg, bad) {
  const t = document.getElementById('toast');
  fill(t, msg);
  t.className = bad ? 'show bad' : 'show';
  clearTimeout(toastTimer);
  toastTimer = setTimeout(() => { t.className = ''; }, 5000);
}

// A labelled form field.
export function field(label, input, hint) {
  const id = input.id || ('f' + Math.random().toString(36).slice(2, 9));
  input.id = id;
  return h('div', {class: 'field'}, h('label', {for: id}, label), input,
           hint ? h('small', {class: 'hint'}, hint) : null);
}

// Saves a Blob as a download named name.
export function saveBlob(blob, name) {
  const url = URL.createObjectURL(blob);
  const a = h('a', {href: url, download: name, class: 'hidden'});
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 60000);
}
