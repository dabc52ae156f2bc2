/* aiprof interactive timeline (docs/reports.md). Reads the JSON block #aiprof-timeline, draws on a canvas.
   Every trace string reaches the page through canvas fillText or textContent only, never as markup.
   Level of detail: per row, events narrower than a pixel merge into one coverage column per pixel
   (prefix sums of durations + binary search), so a frame costs O(visible wide events + width x log n). */
(function () {
  "use strict";
  var dataEl = document.getElementById("aiprof-timeline");
  var host = document.getElementById("aiprof-tl");
  if (!dataEl || !host || !window.HTMLCanvasElement) return;
  var started = performance.now();
  var P;
  try { P = JSON.parse(dataEl.textContent); } catch (e) { return; }

  function decode(text, Type) {
    var bin = atob(text), n = bin.length, bytes = new Uint8Array(n);
    for (var i = 0; i < n; i++) bytes[i] = bin.charCodeAt(i);
    return new Type(bytes.buffer);
  }
  var E = P.events, n = E.count;
  var T = decode(E.t, Float64Array), D = decode(E.d, Float32Array), N = decode(E.n, Uint32Array), K = decode(E.k, Uint8Array);
  var FS = decode(P.flows.src, Int32Array), FD = decode(P.flows.dst, Int32Array);
  var S = P.strings, SPAN = Math.max(P.span_ns, 1);
  var CUM = new Float64Array(n + 1), EMAX = new Float64Array(n), ROWOF = new Int32Array(n);
  for (var i = 0; i < n; i++) CUM[i + 1] = CUM[i] + D[i];

  // ----- layout: one lane per track row, counters below ------------------------------------------
  var GUTTER = 190, AXIS = 22, ROW_H = 14, STEP_H = 16, COUNTER_H = 36, GAP = 5;
  var rows = [], y = AXIS, lastRank = null, multiRank = P.ranks.length > 1, covByRow = {};
  P.coverage.forEach(function (c) { c.bins = decode(c.busy, Float32Array); covByRow[c.track + ":" + c.row] = c; });
  P.tracks.forEach(function (tr, ti) {
    if (multiRank && tr.rank !== lastRank) { rows.push({ header: "rank " + tr.rank, y: y, h: 14 }); y += 14; lastRank = tr.rank; }
    var h = tr.kind === "steps" ? STEP_H : ROW_H;
    var count = Math.max(tr.rows.length, 1);
    for (var r = 0; r < count; r++) {
      var b = tr.rows[r] || [0, 0];
      var row = { track: ti, row: r, lo: b[0], hi: b[1], y: y, h: h, label: r === 0 ? tr.label : "", kind: tr.kind,
                  cov: covByRow[ti + ":" + r] || null, index: rows.length };
      var m = -Infinity;
      for (var k = b[0]; k < b[1]; k++) { var e = T[k] + D[k]; if (e > m) m = e; EMAX[k] = m; ROWOF[k] = rows.length; }
      rows.push(row);
      y += h;
    }
    y += GAP;
  });
  P.counters.forEach(function (c) {
    var max = 0;
    c.v.forEach(function (v) { if (v !== null && v > max) max = v; });
    rows.push({ counter: c, y: y, h: COUNTER_H, label: c.label, max: max || 1, index: rows.length });
    y += COUNTER_H + GAP;
  });
  var HEIGHT = y + 4;

  // ----- page parts (built with createElement / textContent) --------------------------------------
  function el(tag, cls, text) { var e = document.createElement(tag); if (cls) e.className = cls; if (text) e.textContent = text; return e; }
  var bar = el("div", "tl-bar");
  var buttons = [["−", "zoom out (-)", function () { zoomBy(2); }], ["+", "zoom in (+)", function () { zoomBy(0.5); }],
                 ["←", "pan left (←)", function () { panBy(-0.2); }], ["→", "pan right (→)", function () { panBy(0.2); }],
                 ["reset", "whole span (0)", function () { reset(); }]];
  buttons.forEach(function (b) { var btn = el("button", "", b[0]); btn.type = "button"; btn.title = b[1]; btn.setAttribute("aria-label", b[1]); btn.addEventListener("click", b[2]); bar.appendChild(btn); });
  var range = el("span", "mute");
  bar.appendChild(range);
  // The canvas is the height of the visible window only (sticky inside a spacer as tall as every row):
  // however many ranks and threads, the canvas stays small; rows outside the window are not drawn.
  var scroll = el("div", "tl-scroll"), spacer = el("div");
  spacer.style.position = "relative";
  spacer.style.height = HEIGHT + "px";
  var canvas = el("canvas");
  canvas.style.position = "sticky";
  canvas.style.top = "0";
  canvas.tabIndex = 0;
  canvas.setAttribute("role", "application");
  canvas.setAttribute("aria-roledescription", "timeline");
  canvas.setAttribute("aria-label", "Timeline of " + P.tracks.length + " tracks. Plus and minus zoom, left and right arrows pan, " +
                      "up, down, page up and page down scroll the tracks, 0 resets, ] and [ select the next and previous event, " +
                      "Enter zooms to it, Escape clears the selection, Tab leaves.");
  spacer.appendChild(canvas);
  scroll.appendChild(spacer);
  var tip = el("div", "tl-tip");
  tip.hidden = true;
  var sel = el("div", "tl-sel");
  sel.setAttribute("aria-live", "polite");
  host.appendChild(bar);
  host.appendChild(scroll);
  host.appendChild(sel);
  host.appendChild(tip);
  var shown = n.toLocaleString() + " events";
  var notes = [];
  if (P.total_events > n) notes.push(shown + " of " + P.total_events.toLocaleString() + " embedded");
  P.left_out.forEach(function (line) { notes.push("left out: " + line); });
  if (notes.length) { var ul = el("ul", "mute"); notes.forEach(function (t) { ul.appendChild(el("li", "", t)); }); host.appendChild(ul); }
  host.hidden = false;

  // ----- colours (follow the page's light/dark variables) ----------------------------------------
  var css = getComputedStyle(document.documentElement), COL;
  function v(name, fallback) { var s = css.getPropertyValue(name).trim(); return s || fallback; }
  function readColours() {
    css = getComputedStyle(document.documentElement);
    COL = { fg: v("--fg", "#1d1d1f"), mute: v("--mute", "#666"), line: v("--line", "#d8dbe0"), card: v("--card", "#f6f7f9"),
              comm: v("--communication", "#a03fb5"), memcpy: v("--memcpy", "#1c8fb0"), memset: v("--memset", "#3a5fcd"),
              compute: v("--compute", "#2e9e44"), hl: "#ff2d6f" };
  }
  readColours();
  if (window.matchMedia) {  // light / dark follows the system, as the rest of the page does
    var scheme = window.matchMedia("(prefers-color-scheme: dark)");
    if (scheme.addEventListener) scheme.addEventListener("change", function () { readColours(); schedule(); });
  }
  function colour(k, name) {
    switch (k) {
      case 0: return "hsl(" + (18 + (name * 47) % 40) + ",70%," + (52 + (name * 13) % 14) + "%)";
      case 1: return "hsl(" + (210 + (name * 29) % 40) + ",30%,62%)";
      case 2: return "#c9b03a";
      case 3: return "hsl(" + (100 + (name * 37) % 70) + ",48%," + (40 + (name * 11) % 14) + "%)";
      case 4: case 8: return COL.comm;
      case 5: return COL.memcpy;
      case 6: return COL.memset;
      case 7: return name % 2 ? "#9aa3b0" : "#b9c0cb";
      default: return "#999";
    }
  }

  // ----- view state --------------------------------------------------------------------------------
  var v0 = 0, v1 = SPAN, W = 600, VIEW_H = HEIGHT, dpr = window.devicePixelRatio || 1, ctx = canvas.getContext("2d");
  var selected = -1, highlight = null, drag = null, pending = false, lastDraw = 0;
  function plotW() { return Math.max(W - GUTTER, 10); }
  function nsPerPx() { return (v1 - v0) / plotW(); }
  function xOf(t) { return GUTTER + (t - v0) / nsPerPx(); }
  function tOf(x) { return v0 + (x - GUTTER) * nsPerPx(); }
  function clampView() {
    var w = Math.max(v1 - v0, 1000);  // at most 1 µs across the plot
    var pad = SPAN * 0.05;
    if (w > SPAN + 2 * pad) w = SPAN + 2 * pad;
    var c = (v0 + v1) / 2;
    c = Math.min(Math.max(c, -pad + w / 2), SPAN + pad - w / 2);
    v0 = c - w / 2; v1 = c + w / 2;
  }
  function setView(a, b) { v0 = a; v1 = b; clampView(); schedule(); }
  function reset() { setView(-SPAN * 0.01, SPAN * 1.01); }
  function zoomBy(f, atX) {
    var t = atX === undefined ? (v0 + v1) / 2 : tOf(atX);
    setView(t - (t - v0) * f, t + (v1 - t) * f);
  }
  function panBy(frac) { var d = (v1 - v0) * frac; setView(v0 + d, v1 + d); }
  function resize() {
    dpr = window.devicePixelRatio || 1;
    VIEW_H = Math.min(HEIGHT, Math.max(Math.round(window.innerHeight * 0.75), 240));
    scroll.style.maxHeight = VIEW_H + "px";
    W = Math.max(scroll.clientWidth, 300);  // inside the scroll bar, if any
    canvas.width = Math.round(W * dpr); canvas.height = Math.round(VIEW_H * dpr);
    canvas.style.width = W + "px"; canvas.style.height = VIEW_H + "px";
    schedule();
  }
  function schedule() { if (!pending) { pending = true; requestAnimationFrame(function () { pending = false; draw(); }); } }

  // ----- search helpers ------------------------------------------------------------------------------
  function firstEndingAfter(lo, hi, t) { while (lo < hi) { var m = (lo + hi) >> 1; if (EMAX[m] < t) lo = m + 1; else hi = m; } return lo; }
  function firstStartingAt(lo, hi, t) { while (lo < hi) { var m = (lo + hi) >> 1; if (T[m] < t) lo = m + 1; else hi = m; } return lo; }

  // ----- drawing ---------------------------------------------------------------------------------------
  function fmt(ns) {
    var a = Math.abs(ns);
    if (a >= 1e9) return (ns / 1e9).toFixed(a >= 1e10 ? 2 : 3) + " s";
    if (a >= 1e6) return (ns / 1e6).toFixed(a >= 1e7 ? 2 : 3) + " ms";
    if (a >= 1e3) return (ns / 1e3).toFixed(a >= 1e4 ? 2 : 3) + " µs";
    return Math.round(ns) + " ns";
  }
  function at(ns) {  // a point in time, to the ns
    return Math.abs(ns) >= 1e6 ? (ns / 1e6).toFixed(6) + " ms" : (ns / 1e3).toFixed(3) + " µs";
  }
  function tick(t, step) {  // an axis label: as many decimals as the tick step needs
    var unit = Math.max(Math.abs(v0), Math.abs(v1)) >= 1e9 ? 1e9 : Math.max(Math.abs(v0), Math.abs(v1)) >= 1e6 ? 1e6 : 1e3;
    var name = unit === 1e9 ? " s" : unit === 1e6 ? " ms" : " µs";
    var decimals = Math.min(Math.max(Math.ceil(-Math.log10(step / unit) - 1e-9), 0), 9);
    return (t / unit).toFixed(decimals) + name;
  }
  function axis() {
    var step = Math.pow(10, Math.floor(Math.log10(Math.max(v1 - v0, 1) / 8)));
    var per = (v1 - v0) / step;
    if (per > 40) step *= 5; else if (per > 16) step *= 2;
    ctx.fillStyle = COL.mute; ctx.strokeStyle = COL.line; ctx.font = "11px system-ui,sans-serif"; ctx.textBaseline = "middle";
    for (var t = Math.ceil(v0 / step) * step; t <= v1; t += step) {
      var x = xOf(t);
      ctx.beginPath(); ctx.moveTo(x + 0.5, AXIS - 6); ctx.lineTo(x + 0.5, VIEW_H); ctx.globalAlpha = 0.35; ctx.stroke(); ctx.globalAlpha = 1;
      ctx.fillText(tick(t, step), x + 3, AXIS / 2);
    }
  }
  function drawCoverage(row) {
    var c = row.cov, bins = c.bins, ns = nsPerPx();
    ctx.fillStyle = COL.mute;
    var b0 = Math.max(Math.floor((v0 - c.t0) / c.bin), 0), b1 = Math.min(Math.ceil((v1 - c.t0) / c.bin), bins.length);
    for (var b = b0; b < b1; b++) {
      if (bins[b] <= 0) continue;
      var x0 = xOf(c.t0 + b * c.bin), w = Math.max(c.bin / ns, 1);
      ctx.globalAlpha = 0.15 + 0.45 * Math.min(bins[b] / c.bin, 1);
      ctx.fillRect(x0, row.y + 1, w, row.h - 2);
    }
    ctx.globalAlpha = 1;
  }
  function drawRow(row) {
    if (row.cov) drawCoverage(row);
    var lo = row.lo, hi = row.hi;
    if (lo >= hi) return;
    var ns = nsPerPx(), yy = row.y + 1, h = row.h - 2;
    ctx.font = "10px system-ui,sans-serif"; ctx.textBaseline = "middle";
    var i = firstEndingAfter(lo, hi, v0);
    while (i < hi) {
      var s = T[i];
      if (s > v1) break;
      var x0 = (s - v0) / ns, x1 = (s + D[i] - v0) / ns;
      if (x1 - x0 >= 1) {
        var a = Math.max(x0, -2), bx = Math.min(x1, W);
        ctx.fillStyle = colour(K[i], N[i]);
        ctx.fillRect(GUTTER + a, yy, Math.max(bx - a - (bx - a > 3 ? 0.5 : 0), 1), h);
        if (bx - a > 28) {
          var name = S[N[i]], fit = Math.floor((bx - a - 4) / 5.6);
          ctx.fillStyle = "#111";
          ctx.fillText(name.length > fit ? name.slice(0, Math.max(fit - 1, 1)) + "…" : name, GUTTER + a + 2, yy + h / 2, bx - a - 3);
        }
        i++;
        continue;
      }
      // Sub-pixel events: everything starting in this pixel column becomes one coverage column.
      var col = Math.floor(x0), colEnd = v0 + (col + 1) * ns;
      var j = firstStartingAt(i + 1, hi, colEnd);
      if (j - 1 > i && (T[j - 1] + D[j - 1] - colEnd) / ns >= 1) j--;  // a wide last one is drawn on its own
      var busy = Math.min((CUM[j] - CUM[i]) / ns, 1);
      ctx.fillStyle = colour(K[i], N[i]);
      ctx.globalAlpha = 0.3 + 0.7 * busy;
      ctx.fillRect(GUTTER + col, yy, 1, h);
      ctx.globalAlpha = 1;
      i = j;
    }
  }
  function drawMarks(row) {
    // Highlighted names (a finding's evidence) and the selected event, at least 3 px wide.
    var ns = nsPerPx(), i = firstEndingAfter(row.lo, row.hi, v0), count = 0;
    ctx.strokeStyle = COL.hl; ctx.lineWidth = 2;
    for (; i < row.hi && T[i] <= v1 && count < 5000; i++) {
      if (!(highlight && highlight[N[i]]) && i !== selected) continue;
      var x0 = GUTTER + (T[i] - v0) / ns, w = Math.max(D[i] / ns, 3);
      ctx.strokeStyle = i === selected ? COL.fg : COL.hl;
      ctx.strokeRect(x0, row.y + 0.5, w, row.h - 1);
      count++;
    }
    ctx.lineWidth = 1;
  }
  function centreOf(i) { var r = rows[ROWOF[i]]; return [xOf(T[i]), r.y + r.h / 2 - top()]; }
  function top() { return scroll.scrollTop; }
  function visible(row) { var t = top(); return row.y + row.h >= t + AXIS && row.y <= t + VIEW_H; }
  function drawFlows() {
    var drawn = 0, zoomed = (v1 - v0) < SPAN / 20;
    ctx.strokeStyle = COL.fg; ctx.globalAlpha = 0.55;
    for (var f = 0; f < FS.length && drawn < 400; f++) {
      var a = FS[f], b = FD[f];
      var mine = selected >= 0 && (a === selected || b === selected);
      if (!mine && (!zoomed || T[a] > v1 || T[b] < v0 || T[a] < v0 - (v1 - v0) || T[b] > v1 + (v1 - v0))) continue;
      var p = centreOf(a), q = centreOf(b);
      ctx.lineWidth = mine ? 2 : 1;
      ctx.beginPath(); ctx.moveTo(p[0], p[1]);
      ctx.bezierCurveTo(p[0], (p[1] + q[1]) / 2, q[0], (p[1] + q[1]) / 2, q[0], q[1]);
      ctx.stroke();
      ctx.beginPath(); ctx.arc(q[0], q[1], 2, 0, 6.283); ctx.fill();
      drawn++;
    }
    ctx.globalAlpha = 1; ctx.lineWidth = 1;
  }
  function drawCounter(row) {
    var c = row.counter;
    ctx.strokeStyle = COL.compute; ctx.fillStyle = COL.compute; ctx.lineWidth = 1.2;
    ctx.beginPath();
    var on = false;
    for (var k = 0; k < c.t.length; k++) {
      if (c.v[k] === null) { on = false; continue; }
      var x = xOf(c.t[k]), yy = row.y + row.h - 2 - (row.h - 6) * (c.v[k] / row.max);
      if (on) ctx.lineTo(x, yy); else ctx.moveTo(x, yy);
      on = true;
    }
    ctx.stroke(); ctx.lineWidth = 1;
    ctx.fillStyle = COL.mute; ctx.font = "10px system-ui,sans-serif";
    ctx.fillText("max " + fmtValue(row.max, c.unit), GUTTER + 3, row.y + 7);
  }
  function fmtValue(x, unit) {
    if (unit === "B" || unit === "B/s") {
      var u = ["B", "KiB", "MiB", "GiB", "TiB"], i = 0;
      while (Math.abs(x) >= 1024 && i < u.length - 1) { x /= 1024; i++; }
      return x.toFixed(1) + " " + u[i] + (unit === "B/s" ? "/s" : "");
    }
    return (Math.round(x * 10) / 10) + (unit === "%" ? " %" : "");
  }
  function draw() {
    var began = performance.now(), t = top();
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, W, VIEW_H);
    ctx.save();
    ctx.beginPath(); ctx.rect(GUTTER, 0, W - GUTTER, VIEW_H); ctx.clip();
    axis();
    ctx.save();
    ctx.beginPath(); ctx.rect(GUTTER, AXIS, W - GUTTER, VIEW_H - AXIS); ctx.clip();
    ctx.translate(0, -t);
    var shownRows = rows.filter(function (row) { return !row.header && visible(row); });
    shownRows.forEach(function (row) { if (row.counter) drawCounter(row); else drawRow(row); });
    if (highlight || selected >= 0) shownRows.forEach(function (row) { if (!row.counter) drawMarks(row); });
    ctx.restore();
    drawFlows();
    if (drag && drag.select) {
      ctx.fillStyle = COL.fg; ctx.globalAlpha = 0.12;
      ctx.fillRect(Math.min(drag.x0, drag.x), 0, Math.abs(drag.x - drag.x0), VIEW_H);
      ctx.globalAlpha = 1;
    }
    ctx.restore();
    // labels in the gutter (canvas text: never markup)
    ctx.fillStyle = COL.card; ctx.fillRect(0, 0, GUTTER - 2, VIEW_H);
    ctx.save();
    ctx.beginPath(); ctx.rect(0, AXIS, GUTTER - 2, VIEW_H - AXIS); ctx.clip();
    ctx.font = "11px system-ui,sans-serif"; ctx.textBaseline = "middle";
    rows.forEach(function (row) {
      if ((!row.label && !row.header) || !visible(row)) return;
      ctx.fillStyle = row.header ? COL.fg : COL.mute;
      ctx.font = row.header ? "bold 11px system-ui,sans-serif" : "11px system-ui,sans-serif";
      ctx.fillText(row.header || row.label, 4, row.y - t + row.h / 2, GUTTER - 10);
    });
    ctx.restore();
    range.textContent = "showing " + fmt(v0) + " – " + fmt(v1) + " (" + fmt(v1 - v0) + " wide) · " + shown;
    lastDraw = performance.now() - began;
  }

  // ----- hit test, tooltip, selection ------------------------------------------------------------------
  function rowAt(yy) {  // yy: canvas px
    if (yy < AXIS) return null;
    yy += top();
    for (var r = 0; r < rows.length; r++) { var row = rows[r]; if (yy >= row.y && yy < row.y + row.h) return row; }
    return null;
  }
  function hitIndex(x, yy) {
    var row = rowAt(yy);
    if (!row || row.header || row.counter || x < GUTTER || row.lo >= row.hi) return -1;
    var t = tOf(x), tol = nsPerPx() * 1.5;
    var i = firstStartingAt(row.lo, row.hi, t + 1e-9) - 1;  // last event starting at or before t
    var best = -1, dist = Infinity;
    for (var k = Math.max(i - 1, row.lo); k <= Math.min(i + 1, row.hi - 1); k++) {
      var d = t < T[k] ? T[k] - t : (t > T[k] + D[k] ? t - T[k] - D[k] : 0);
      if (d < dist || (d === dist && best >= 0 && D[k] < D[best])) { dist = d; best = k; }
    }
    return dist <= tol ? best : -1;
  }
  function trackLabel(i) { var tr = P.tracks[rows[ROWOF[i]].track]; return (multiRank ? "rank " + tr.rank + " · " : "") + tr.label; }
  function info(i) {
    return { index: i, name: S[N[i]], start_ns: T[i], dur_ns: D[i], end_ns: T[i] + D[i],
             track: trackLabel(i), category: P.categories[K[i]] };
  }
  function partners(i) {
    var out = [];
    for (var f = 0; f < FS.length; f++) {
      if (FS[f] === i) out.push("launches " + S[N[FD[f]]] + " at " + at(T[FD[f]]) + " (" + trackLabel(FD[f]) + ")");
      else if (FD[f] === i) out.push("launched by " + S[N[FS[f]]] + " at " + at(T[FS[f]]) + " (" + trackLabel(FS[f]) + ")");
    }
    return out;
  }
  function select(i) {
    selected = i;
    if (i < 0) { sel.replaceChildren(); schedule(); return; }
    var e = info(i), more = partners(i);
    sel.replaceChildren(el("span", "", "selected: "), el("b", "tl-name", e.name),
                        el("span", "", " · " + e.category + " · " + e.track + " · start " + at(e.start_ns) + " · duration " +
                           fmt(e.dur_ns) + (more.length ? " · " + more.join(" · ") : "")));
    schedule();
  }
  function local(ev) { var r = canvas.getBoundingClientRect(); return [ev.clientX - r.left, ev.clientY - r.top]; }
  canvas.addEventListener("mousemove", function (ev) {
    var p = local(ev);
    if (drag) {
      if (Math.abs(p[0] - drag.x0) > 3) drag.moved = true;
      if (drag.select) { drag.x = p[0]; schedule(); return; }
      var dt = (p[0] - drag.x) * nsPerPx(); drag.x = p[0];
      setView(v0 - dt, v1 - dt);
      return;
    }
    var i = hitIndex(p[0], p[1]);
    if (i < 0) { tip.hidden = true; return; }
    var e = info(i), head = el("div", "tl-name", e.name), rest = el("div");
    rest.textContent = e.category + " · " + e.track + "\nstart " + at(e.start_ns) + " · duration " + fmt(e.dur_ns);
    tip.replaceChildren(head, rest);
    tip.hidden = false;
    tip.style.left = Math.min(ev.clientX + 12, window.innerWidth - 320) + "px";
    tip.style.top = (ev.clientY + 14) + "px";
  });
  canvas.addEventListener("mouseleave", function () { tip.hidden = true; });
  canvas.addEventListener("mousedown", function (ev) {
    var p = local(ev);
    drag = { x0: p[0], x: p[0], y: p[1], select: ev.shiftKey, moved: false };
    ev.preventDefault();
    canvas.focus();
  });
  window.addEventListener("mouseup", function (ev) {
    if (!drag) return;
    var d = drag; drag = null;
    if (d.select && d.moved) {
      var a = tOf(Math.min(d.x0, d.x)), b = tOf(Math.max(d.x0, d.x));
      setView(a, b);
    } else if (!d.moved) {
      select(hitIndex(d.x0, d.y));
    }
    schedule();
  });
  canvas.addEventListener("wheel", function (ev) {
    ev.preventDefault();
    var p = local(ev);
    if (ev.shiftKey) { scroll.scrollTop += ev.deltaY || ev.deltaX; return; }  // through the tracks
    if (Math.abs(ev.deltaX) > Math.abs(ev.deltaY)) { panBy(ev.deltaX / plotW()); return; }
    zoomBy(Math.exp(ev.deltaY * 0.002), p[0]);
  }, { passive: false });
  canvas.addEventListener("keydown", function (ev) {
    var k = ev.key, done = true;
    if (k === "+" || k === "=") zoomBy(0.5);
    else if (k === "-" || k === "_") zoomBy(2);
    else if (k === "ArrowLeft") panBy(-0.2);
    else if (k === "ArrowRight") panBy(0.2);
    else if (k === "0" || k === "Home") reset();
    else if (k === "PageDown" || k === "ArrowDown") scroll.scrollTop += k === "PageDown" ? VIEW_H - AXIS : ROW_H * 3;
    else if (k === "PageUp" || k === "ArrowUp") scroll.scrollTop -= k === "PageUp" ? VIEW_H - AXIS : ROW_H * 3;
    else if (k === "Escape") { select(-1); highlight = null; }
    else if (k === "]" || k === "[") step(k === "]" ? 1 : -1);
    else if (k === "Enter" && selected >= 0) { var w = Math.max(D[selected] * 6, 20000); setView(T[selected] - w / 3, T[selected] - w / 3 + w); }
    else done = false;
    if (done) ev.preventDefault();
  });
  // Keyboard selection: "]" / "[" select the next / previous event of the selected event's row (the first
  // event in view when none is selected), panning to keep it in view; Enter zooms to it.
  function step(dir) {
    var i = selected;
    if (i < 0) {
      for (var r = 0; r < rows.length && i < 0; r++) {
        var row = rows[r];
        if (row.header || row.counter || row.lo >= row.hi || !visible(row)) continue;
        var k = firstEndingAfter(row.lo, row.hi, v0);
        if (k < row.hi && T[k] <= v1) i = k;
      }
      if (i < 0) return;
    } else {
      var cur = rows[ROWOF[i]], next = i + dir;
      if (next < cur.lo || next >= cur.hi) return;
      i = next;
    }
    if (T[i] + D[i] < v0 || T[i] > v1) { var half = (v1 - v0) / 2; setView(T[i] - half, T[i] + half); }
    select(i);
  }
  window.addEventListener("resize", resize);
  scroll.addEventListener("scroll", schedule);

  // ----- findings: "show in timeline" -----------------------------------------------------------------
  function show(f) {
    var target = P.findings[f];
    if (!target) return false;
    highlight = null;
    if (target.names.length) { highlight = {}; target.names.forEach(function (id) { highlight[id] = true; }); }
    var a = target.step ? target.step[0] : 0, b = target.step ? target.step[1] : SPAN, first = -1;
    if (highlight) {
      for (var pass = 0; pass < 2 && first < 0; pass++) {  // in the slowest step first, then anywhere
        if (pass === 1) { a = 0; b = SPAN; }
        P.tracks.forEach(function (tr) {
          if (target.rank !== null && tr.rank !== target.rank && pass === 0) return;
          tr.rows.forEach(function (rb) {
            for (var k = firstEndingAfter(rb[0], rb[1], a); k < rb[1] && T[k] <= b; k++) {
              if (highlight[N[k]] && (first < 0 || T[k] < T[first])) { first = k; break; }
            }
          });
        });
      }
    }
    if (first >= 0) {
      var w = Math.max(D[first] * 6, 20000);
      setView(T[first] - w / 3, T[first] - w / 3 + w);
      select(first);
    } else if (target.step) {
      var pad = (target.step[1] - target.step[0]) * 0.03;
      setView(target.step[0] - pad, target.step[1] + pad);
    }
    host.scrollIntoView({ block: "nearest" });
    canvas.focus();
    return true;
  }
  var articles = document.querySelectorAll("#findings article.finding");
  for (var f = 0; f < articles.length && f < P.findings.length; f++) {
    if (!P.findings[f]) continue;
    (function (index) {
      var btn = el("button", "tl-show", "show in timeline");
      btn.type = "button";
      btn.addEventListener("click", function () { show(index); });
      articles[index].appendChild(btn);
    })(f);
  }

  resize();
  reset();
  draw();
  var loadMs = performance.now() - started;
  // A small API for tests and the curious (read-only views of the state).
  window.aiprofTimeline = {
    ready: true,
    loadMs: loadMs,
    lastDrawMs: function () { return lastDraw; },
    events: n,
    view: function () { return [v0, v1]; },
    setView: function (a, b) { setView(a, b); draw(); return [v0, v1]; },
    geometry: function () { return { gutter: GUTTER, width: W, height: VIEW_H, content: HEIGHT }; },
    // A row's place on the canvas (px from its top), scrolled into the window first.
    rowOf: function (track, row) {
      for (var r = 0; r < rows.length; r++) {
        var it = rows[r];
        if (it.track !== track || it.row !== row || it.header || it.counter) continue;
        if (!visible(it) || it.y + it.h > top() + VIEW_H) { scroll.scrollTop = Math.max(it.y - AXIS - 20, 0); draw(); }
        return { y: it.y - top(), h: it.h };
      }
      return null;
    },
    hitTest: function (x, yy) { var i = hitIndex(x, yy); return i < 0 ? null : info(i); },
    selected: function () { return selected < 0 ? null : info(selected); },
    show: show,
    redraw: function () { draw(); return lastDraw; }
  };
})();
