// files.mjs - a box's file browser: list a folder, open subfolders, upload
// files into it, download a file or the folder as a zip, preview text and
// images, delete. Every byte goes through fetch() with the token header;
// names and contents are shown as text (dom.mjs), images from blob: URLs.
import {filePath, request} from './api.mjs';
import {errText} from './app.mjs';
import {fill, fmtBytes, fmtTime, h, saveBlob, toast} from './dom.mjs';

const PREVIEW_MAX = 1 << 20;
const IMAGE = /\.(png|jpe?g|gif|webp|bmp|ico|svg)$/i;

function join(dir, name) { return dir === '/' ? '/' + name : dir.replace(/\/+$/, '') + '/' + name; }
function parent(dir) { const i = dir.replace(/\/+$/, '').lastIndexOf('/'); return i <= 0 ? '/' : dir.slice(0, i); }

export function filesPanel(boxId, signal) {
  let cwd = '/workspace';
  const crumbs = h('nav', {class: 'crumbs', 'aria-label': 'Folder'});
  const tbody = h('tbody');
  const upload = h('input', {type: 'file', multiple: true, id: 'upload-input'});
  const upBtn = h('button', {type: 'submit', id: 'upload-btn'}, 'Upload');
  const upForm = h('form', {class: 'upload'}, h('label', {for: 'upload-input'}, 'Upload into this folder: '), upload, upBtn);
  const zipBtn = h('button', {type: 'button', id: 'zip-btn', on: {click: zip}}, 'Download folder as zip');
  const preview = h('div', {class: 'preview', id: 'preview', 'aria-live': 'polite'});
  const section = h('section', {'aria-labelledby': 'files-title'},
    h('div', {class: 'head'}, h('h2', {id: 'files-title'}, 'Files'), zipBtn),
    crumbs, upForm,
    h('table', {class: 'list', id: 'files'},
      h('thead', h('tr', ['Name', 'Size', 'Modified', ''].map(t => h('th', {scope: 'col'}, t)))), tbody),
    preview);

  upForm.addEventListener('submit', async ev => {
    ev.preventDefault();
    const files = [...upload.files];
    if (!files.length) { toast('Choose a file first', true); return; }
    upBtn.disabled = true;
    try {
      for (const f of files) {
        await request('PUT', filePath(boxId, join(cwd, f.name)), {body: f, signal,
          headers: {'Content-Type': 'application/octet-stream'}});
      }
      toast('Uploaded ' + files.length + ' file' + (files.length > 1 ? 's' : ''));
      upload.value = '';
      await list();
    } catch (e) { toast(errText(e), true); }
    upBtn.disabled = false;
  });

  async function download(path, name) {
    try {
      const r = await request('GET', filePath(boxId, path), {signal});
      saveBlob(await r.blob(), name);
    } catch (e) { toast(errText(e), true); }
  }
  async function zip() {
    try {
      const r = await request('GET', filePath(boxId, cwd, {format: 'zip'}), {signal});
      const name = (cwd === '/' ? 'root' : cwd.split('/').filter(Boolean).pop()) + '.zip';
      saveBlob(await r.blob(), name);
    } catch (e) { toast(errText(e), true); }
  }
  async function remove(e) {
    if (!confirm('Delete ' + e.path + (e.type === 'dir' ? ' and everything in it' : '') + '?')) return;
    try {
      await request('DELETE', filePath(boxId, e.path, e.type === 'dir' ? {recursive: '1'} : {}), {signal});
      toast('Deleted ' + e.path);
      list();
    } catch (err) { toast(errText(err), true); }
  }
  async function show(e) {
    fill(preview, h('h3', {}, e.path));
    if (e.size > PREVIEW_MAX) {
      preview.append(h('p', {class: 'muted'}, 'Too large to preview (' + fmtBytes(e.size) + '): download it.'));
      return;
    }
    try {
      const r = await request('GET', filePath(boxId, e.path), {signal});
      const blob = await r.blob();
      if (IMAGE.test(e.name)) {
        // An <img> never runs scripts, even from an SVG; the CSP allows blob: images only.
        const type = /\.svg$/i.test(e.name) ? 'image/svg+xml' : '';
        const url = URL.createObjectURL(type ? new Blob([blob], {type}) : blob);
        const img = h('img', {alt: 'preview of ' + e.name, src: url});
        img.addEventListener('load', () => URL.revokeObjectURL(url));
        preview.append(img);
      } else {
        const text = new TextDecoder('utf-8').decode(await blob.arrayBuffer());
        preview.append(h('pre', {class: 'text'}, text));
      }
    } catch (err) { preview.append(h('p', {class: 'error'}, errText(err))); }
  }

  async function list() {
    fill(crumbs);
    const parts = cwd.split('/').filter(Boolean);
    crumbs.append(h('button', {type: 'button', class: 'link', on: {click: () => go('/')}}, '/'));
    parts.forEach((p, i) => {
      const to = '/' + parts.slice(0, i + 1).join('/');
      crumbs.append(h('button', {type: 'button', class: 'link', on: {click: () => go(to)}}, p), '/');
    });
    try {
      const r = await request('GET', filePath(boxId, cwd), {signal});
      const j = await r.json();
      const ents = (j.entries || []).slice().sort((a, b) => (a.type === 'dir' ? 0 : 1) - (b.type === 'dir' ? 0 : 1) || a.name.localeCompare(b.name));
      const rows = [];
      if (cwd !== '/') rows.push(h('tr', {}, h('td', {colspan: 4}, h('button', {type: 'button', class: 'link', on: {click: () => go(parent(cwd))}}, '.. (up)'))));
      for (const e of ents) {
        const isDir = e.type === 'dir';
        const name = h('button', {type: 'button', class: 'link name', title: isDir ? 'Open folder' : 'Preview',
                                  on: {click: () => isDir ? go(e.path) : show(e)}},
                       e.name + (isDir ? '/' : e.type === 'symlink' ? ' → ' + (e.link || '') : ''));
        rows.push(h('tr', {'data-type': e.type},
          h('td', {}, name),
          h('td', {class: 'num'}, isDir ? '–' : fmtBytes(e.size)),
          h('td', {}, fmtTime(e.mtime * 1000)),
          h('td', {class: 'acts'},
            e.type === 'file' ? h('button', {type: 'button', class: 'small', 'aria-label': 'Download ' + e.name, on: {click: () => download(e.path, e.name)}}, 'Download') : null,
            h('button', {type: 'button', class: 'small danger', 'aria-label': 'Delete ' + e.name, on: {click: () => remove(e)}}, 'Delete'))));
      }
      if (!ents.length) rows.push(h('tr', {}, h('td', {colspan: 4, class: 'muted'}, 'Empty folder.')));
      fill(tbody, rows);
    } catch (e) {
      fill(tbody, h('tr', h('td', {colspan: 4, class: 'error'}, errText(e))));
    }
  }
  function go(dir) { cwd = dir; fill(preview); list(); }
  section.refresh = list;
  list();
  return section;
}
