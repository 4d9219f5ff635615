// vitviz's notebook view: a plain ES module, no build step, nothing fetched. anywidget calls render({ model, el });
// an exported HTML file (vitviz/notebook/export.py) inlines this file and calls render with offlineModel(state).
// Python computes every map; this draws the packed frame (uint8 levels on one colour scale) over the photos, and
// turns clicks and pickers into traitlet changes.

const SETTINGS = ["method", "layer", "head", "patch", "image", "target", "token", "kind"];
const ALPHA = 0.6;
const DRAWN = 256; // pixels: the longest side a photo is drawn at, at the least

// The name of the frame a view's settings draw: notebook/export.py key_of (photos) and notebook/answers.py key_of
// (an answer) build the same strings.
function frameKey(state) {
  const part = (value) => (value === null || value === undefined ? "all" : String(value));
  if (state.mode === "answer") {
    if (state.kind === "relevance") return `relevance|${part(state.token)}`;
    return `answer|${part(state.token)}|${part(state.layer)}|${state.head}`;
  }
  if (state.mode === "index") return `index|${state.kind}`;
  const patch = state.patch;
  if (patch !== null && patch !== undefined) return `patch|${state.layer}|${state.head}|${patch[0]},${patch[1]}`;
  if (state.method === "attention") return `attention|${state.layer}|${state.head}`;
  if ((state.class_methods || []).includes(state.method)) {
    // a class-specific map is another frame for another class: its key holds the class's index ("top": none chosen)
    const target = typeof state.target === "string" ? (state.classes || []).indexOf(state.target) : state.target;
    return `${state.method}|${target === null || target === undefined ? "top" : target}`;
  }
  return state.method;
}

function decode(text) {
  const raw = atob(text);
  const out = new Uint8Array(raw.length);
  for (let i = 0; i < raw.length; i++) out[i] = raw.charCodeAt(i);
  return out;
}

// A legend's number to three significant digits, trailing zeros dropped: 100 -> "100", 0.1500 -> "0.15".
function valueText(value) {
  return String(Number(Number(value).toPrecision(3)));
}

function element(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

function picker(label, options, onChange) {
  const wrap = element("label", "vitviz-picker", label + " ");
  const select = element("select");
  for (const [value, text] of options) {
    const option = element("option", "", text);
    option.value = JSON.stringify(value);
    select.appendChild(option);
  }
  select.addEventListener("change", () => onChange(JSON.parse(select.value)));
  wrap.appendChild(select);
  return { wrap, select };
}

// The map of one image as a (cols x rows) canvas of its colours, to be drawn scaled (bilinear) over the photo.
function mapCanvas(levels, rows, cols, colours, mask) {
  const canvas = element("canvas");
  canvas.width = cols;
  canvas.height = rows;
  const context = canvas.getContext("2d");
  const pixels = context.createImageData(cols, rows);
  for (let i = 0; i < rows * cols; i++) {
    const c = levels[i] * 3;
    pixels.data.set([colours[c], colours[c + 1], colours[c + 2], mask && mask[i] ? 0 : 255], i * 4);
  }
  context.putImageData(pixels, 0, 0);
  return canvas;
}

function drawPhoto(canvas, photo, levels, mask, frame, colours, selected) {
  const context = canvas.getContext("2d");
  const [w, h] = [canvas.width, canvas.height];
  const [l, t, r, b] = photo.box.map((v, i) => v * (i % 2 === 0 ? w : h));
  context.clearRect(0, 0, w, h);
  context.drawImage(photo.img, 0, 0, w, h);
  context.fillStyle = "rgba(0, 0, 0, 0.45)"; // outside the box the model never saw the photo: dimmed
  context.fillRect(0, 0, w, h);
  context.save();
  context.beginPath();
  context.rect(l, t, r - l, b - t);
  context.clip();
  context.drawImage(photo.img, 0, 0, w, h);
  context.globalAlpha = ALPHA;
  context.imageSmoothingEnabled = true;
  context.drawImage(mapCanvas(levels, frame.rows, frame.cols, colours, mask), l, t, r - l, b - t);
  context.restore();
  if (selected) {
    const [cw, ch] = [(r - l) / frame.cols, (b - t) / frame.rows];
    context.strokeStyle = "rgb(0, 255, 255)";
    context.lineWidth = 2;
    context.strokeRect(l + selected[1] * cw, t + selected[0] * ch, cw, ch);
  }
}

function drawLegend(legend, frame, colours) {
  legend.replaceChildren();
  legend.appendChild(element("div", "vitviz-legend-label", frame.label || ""));
  const bar = element("canvas", "vitviz-legend-bar");
  bar.width = 256;
  bar.height = 1;
  const context = bar.getContext("2d");
  const pixels = context.createImageData(256, 1);
  for (let i = 0; i < 256; i++) pixels.data.set([colours[3 * i], colours[3 * i + 1], colours[3 * i + 2], 255], 4 * i);
  context.putImageData(pixels, 0, 0);
  legend.appendChild(bar);
  const ends = element("div", "vitviz-legend-ends");
  ends.appendChild(element("span", "vitviz-low", valueText(frame.low)));
  ends.appendChild(element("span", "vitviz-high", valueText(frame.high)));
  legend.appendChild(ends);
}

function drawBare(canvas, photo) {
  const context = canvas.getContext("2d");
  context.clearRect(0, 0, canvas.width, canvas.height);
  context.drawImage(photo.img, 0, 0, canvas.width, canvas.height);
}

// The (row, col) under a click at (x, y) css pixels of a canvas shown at (width, height), or null outside the box.
function patchAt(x, y, width, height, box, rows, cols) {
  const [l, t, r, b] = [box[0] * width, box[1] * height, box[2] * width, box[3] * height];
  if (x < l || x >= r || y < t || y >= b) return null;
  return [Math.min(rows - 1, Math.floor(((y - t) / (b - t)) * rows)), Math.min(cols - 1, Math.floor(((x - l) / (r - l)) * cols))];
}

// The pickers of a photo view: method, block, head, class, and a button that clears the clicked patch.
function photoBar(model, save) {
  const method = picker("method", model.get("methods").map((m) => [m, m]), (v) => save({ method: v, patch: null }));
  const layers = [...Array(model.get("num_layers")).keys()].map((i) => [i, String(i)]);
  const layer = picker("block", layers, (v) => save({ layer: v }));
  const heads = [["mean", "mean"], ...[...Array(model.get("num_heads")).keys()].map((i) => [i, String(i)])];
  const head = picker("head", heads, (v) => save({ head: v }));
  const classes = model.get("classes").map((name, i) => [i, name]);
  const target = picker("class", [[null, "top class"], ...classes], (v) => save({ target: v }));
  const clear = element("button", "vitviz-clear", "clear patch");
  clear.addEventListener("click", () => save({ patch: null }));
  const sync = () => {
    for (const [name, part] of [["method", method], ["layer", layer], ["head", head], ["target", target]]) {
      part.select.value = JSON.stringify(model.get(name));
    }
    target.wrap.hidden = model.get("classes").length === 0;
    const patch = model.get("patch");
    clear.hidden = patch === null || patch === undefined;
  };
  return { parts: [method.wrap, layer.wrap, head.wrap, target.wrap, clear], sync };
}

// The pickers of an answer view: attention or relevance, layer, head; and the answer's tokens to click.
function answerBar(model, save) {
  const kind = picker("map", [["attention", "attention"], ["relevance", "relevance"]], (v) => save({ kind: v }));
  const layers = [[null, "all"], ...[...Array(model.get("num_layers")).keys()].map((i) => [i, String(i)])];
  const layer = picker("layer", layers, (v) => save({ layer: v }));
  const heads = [["mean", "mean"], ...[...Array(model.get("num_heads")).keys()].map((i) => [i, String(i)])];
  const head = picker("head", heads, (v) => save({ head: v }));
  const tokens = element("div", "vitviz-tokens");
  const buttons = [[null, "all tokens"], ...model.get("tokens").map((text, i) => [i, text])].map(([index, text]) => {
    const button = element("button", "vitviz-token", text);
    button.dataset.token = index === null ? "all" : String(index);
    button.addEventListener("click", () => save({ token: index }));
    tokens.appendChild(button);
    return [index, button];
  });
  const sync = () => {
    for (const [name, part] of [["kind", kind], ["layer", layer], ["head", head]]) {
      part.select.value = JSON.stringify(model.get(name));
    }
    const relevance = model.get("kind") === "relevance";
    layer.wrap.hidden = relevance;
    head.wrap.hidden = relevance;
    for (const [index, button] of buttons) button.classList.toggle("vitviz-chosen", index === model.get("token"));
  };
  const question = element("div", "vitviz-question", model.get("question"));
  return { parts: [kind.wrap, layer.wrap, head.wrap], below: [question, tokens], sync };
}

// The picker of an index view: which stored map; and the condition that chose the images.
function indexBar(model, save) {
  const kind = picker("map", model.get("kinds").map((k) => [k, k]), (v) => save({ kind: v }));
  const where = element("span", "vitviz-where", `where ${model.get("where")}`);
  const sync = () => {
    kind.select.value = JSON.stringify(model.get("kind"));
  };
  return { parts: [kind.wrap, where], sync };
}

function render({ model, el }) {
  const root = element("div", "vitviz-view");
  el.appendChild(root);
  const mode = model.get("mode");
  const answer = mode === "answer";
  const grid = mode === "index";
  const save = (changes) => {
    for (const [name, value] of Object.entries(changes)) model.set(name, value);
    model.save_changes();
  };
  const bar = element("div", "vitviz-bar");
  const pickers = answer ? answerBar(model, save) : grid ? indexBar(model, save) : photoBar(model, save);
  bar.append(...pickers.parts);
  const error = element("div", "vitviz-error");
  const row = element("div", grid ? "vitviz-images vitviz-grid" : "vitviz-images");
  const legend = element("div", "vitviz-legend");
  root.append(bar, ...(pickers.below || []), error, row, legend);

  const photos = model.get("photos").map((photo, i) => {
    const cell = element("div", "vitviz-cell");
    const canvas = element("canvas", "vitviz-map");
    canvas.dataset.image = String(i);
    cell.appendChild(canvas);
    if (grid) {
      cell.appendChild(element("div", "vitviz-caption", photo.caption || ""));
      canvas.addEventListener("click", () => save({ image: i }));
    } else if (!answer) {
      const list = element("ol", "vitviz-predictions");
      for (const [name, p] of model.get("predictions")[i] || []) {
        list.appendChild(element("li", "", `${name} ${(100 * p).toFixed(1)}%`));
      }
      cell.appendChild(list);
      canvas.addEventListener("click", (event) => {
        if (!gridShape) return;
        const rect = canvas.getBoundingClientRect();
        const [x, y] = [event.clientX - rect.left, event.clientY - rect.top];
        const hit = patchAt(x, y, rect.width, rect.height, photo.box, gridShape[0], gridShape[1]);
        if (hit) save({ image: i, patch: hit });
      });
    } else {
      canvas.classList.add("vitviz-still");
    }
    row.appendChild(cell);
    const img = new Image();
    const entry = { ...photo, img, canvas, ready: false };
    img.onload = () => {
      const scale = Math.max(1, DRAWN / Math.max(img.naturalWidth, img.naturalHeight)); // small photos drawn larger
      canvas.width = Math.round(img.naturalWidth * scale);
      canvas.height = Math.round(img.naturalHeight * scale);
      entry.ready = true;
      draw();
    };
    img.src = photo.src;
    return entry;
  });

  let gridShape = null; // the last frame's (rows, cols): where a click lands while no map is drawn
  function draw() {
    const frame = model.get("frame");
    const drawn = Boolean(frame && frame.maps);
    const colours = decode(model.get("colours"));
    const selected = answer || grid ? null : model.get("patch");
    root.dataset.key = drawn ? frame.key || "" : "";
    if (drawn) gridShape = [frame.rows, frame.cols];
    photos.forEach((photo, i) => {
      photo.canvas.parentElement.classList.toggle("vitviz-opened", grid && i === model.get("image"));
      if (!drawn) {
        // this setting draws nothing (the error line says why): the photo alone, no stale map
        delete photo.canvas.dataset.levels;
        if (photo.ready) drawBare(photo.canvas, photo);
        return;
      }
      const levels = decode(frame.maps[i]);
      const mask = frame.masks ? decode(frame.masks[i]) : null;
      photo.canvas.dataset.levels = levels.join(",");
      const outline = i === model.get("image") ? selected : null;
      if (photo.ready) drawPhoto(photo.canvas, photo, levels, mask, frame, colours, outline);
    });
    if (drawn) drawLegend(legend, frame, colours);
    else legend.replaceChildren();
    pickers.sync();
  }
  const showError = () => {
    error.textContent = model.get("error") || "";
  };
  for (const name of ["frame", "colours", ...SETTINGS]) model.on(`change:${name}`, draw);
  model.on("change:error", showError);
  showError();
  draw();
  return () => root.remove();
}

// A stand-in for the kernel's model in an exported file: settings look their frame up in state.offline.
function offlineModel(state) {
  const listeners = {};
  const changed = new Set();
  const fire = (name) => (listeners[`change:${name}`] || []).forEach((callback) => callback());
  return {
    get: (name) => state[name],
    set: (name, value) => {
      state[name] = value;
      changed.add(name);
    },
    save_changes: () => {
      const key = frameKey(state);
      const frame = state.offline[key];
      if (frame) {
        state.frame = { ...frame, key, label: key.replaceAll("|", " · ") };
        state.error = "";
      } else {
        state.frame = {}; // not the last setting's map under this one's name: nothing, and the error line says why
        state.error = `not in this file: ${key} (run the notebook for every setting)`;
      }
      for (const name of [...changed, "frame", "error"]) fire(name);
      changed.clear();
    },
    on: (event, callback) => (listeners[event] = listeners[event] || []).push(callback),
    off: () => {},
    send: () => {},
  };
}

export default { render };
