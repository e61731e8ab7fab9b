// A tiny syntax highlighter that builds text nodes in spans (the usual
// libraries return HTML strings, which the console never parses): comments,
// strings, numbers and common keywords.
const kw = new Set("if then else elif fi for while do done case esac function return import from export const let var def class in not and or true false null None True False package func go type struct interface".split(" "));
const tok = /(#[^\n]*|\/\/[^\n]*)|("(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')|(\b\d+(?:\.\d+)?\b)|([A-Za-z_][A-Za-z0-9_]*)/g;

export function highlight(text: string, name: string): DocumentFragment {
  const frag = document.createDocumentFragment();
  const code = /\.(sh|py|js|ts|go|json|ya?ml|toml|rb|c|h|rs|mjs)$/.test(name) || text.startsWith("#!");
  if (!code || text.length > 256 * 1024) {
    frag.appendChild(document.createTextNode(text));
    return frag;
  }
  let last = 0;
  for (const m of text.matchAll(tok)) {
    const i = m.index ?? 0;
    const cls = m[1] ? "tk-c" : m[2] ? "tk-s" : m[3] ? "tk-n" : m[4] && kw.has(m[4]) ? "tk-k" : "";
    if (!cls) continue;
    if (i > last) frag.appendChild(document.createTextNode(text.slice(last, i)));
    const span = document.createElement("span");
    span.className = cls;
    span.textContent = m[0];
    frag.appendChild(span);
    last = i + m[0].length;
  }
  frag.appendChild(document.createTextNode(text.slice(last)));
  return frag;
}
