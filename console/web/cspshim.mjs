// cspshim.mjs - lets xterm.js run under the console's Content-Security-Policy
// (style-src 'self', no 'unsafe-inline'). xterm.js writes its computed styles
// (cell sizes, theme colours) as the text of <style> elements, and true-colour
// cells through setAttribute('style', ...): the policy blocks both. Stylesheets
// made with the CSSOM (new CSSStyleSheet(), element.style) are not inline markup
// and are allowed, so the shim turns those writes into CSSOM writes:
//  - document.createElement('style') gives an inert <template> whose text goes
//    to a constructed sheet adopted by the document (dropped with the element);
//  - setAttribute('style', text) sets element.style.cssText.
// The console's own code never writes styles (dom.mjs refuses to).

export function installStyleShim() {
  if (document.agentboxStyleShim) return;
  document.agentboxStyleShim = true;
  const create = document.createElement.bind(document);
  document.createElement = function (tag, opts) {
    if (String(tag).toLowerCase() !== 'style') return create(tag, opts);
    // An inert stand-in: even an empty <style> in the page is a violation.
    const el = create('template');
    adopt(el);
    return el;
  };
  const setAttr = Element.prototype.setAttribute;
  Element.prototype.setAttribute = function (name, value) {
    if (String(name).toLowerCase() === 'style' && this.style) {
      this.style.cssText = String(value);
      return;
    }
    return setAttr.call(this, name, value);
  };
}

function adopt(el) {
  const sheet = new CSSStyleSheet();
  let text = '';
  Object.defineProperty(el, 'textContent', {
    configurable: true,
    get() { return text; },
    set(v) { text = String(v ?? ''); sheet.replaceSync(text); },
  });
  document.adoptedStyleSheets = [...document.adoptedStyleSheets, sheet];
  const remove = el.remove.bind(el);
  el.remove = () => {
    document.adoptedStyleSheets = document.adoptedStyleSheets.filter(s => s !== sheet);
    remove();
  };
}
