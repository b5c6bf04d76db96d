/* llm-locust live LLM view: polls ./llm/data, keeps the series, draws with uPlot. No network beyond this server. */
(function () {
  "use strict";
  var POLL_MS = 1500, HIDDEN_MS = 5000, SMOOTH_S = 10;
  var LAT = ["ttft", "itl", "tpot", "e2e"];
  var LAT_NAME = { ttft: "TTFT", itl: "ITL", tpot: "TPOT", e2e: "E2E" };
  // the request phases, over the run (docs/metrics.md "Request phases"): TTFT = send + wait + first token
  var PHASES = [["phase_connect", "connect"], ["phase_send", "send"], ["phase_wait", "wait (headers)"], ["phase_first_token", "first token"], ["phase_receive", "receive"]];
  var BAD_FLAGS = { client_saturated: "client saturated: its figures may be distorted", errors: "error rate above 1%", length_mismatch: "output lengths did not match the requested ones", no_data: "no successful request" };

  // steps: the ladder's rows merged by step (a poll carries only the rows that changed); verdict likewise
  var st = { since: 0, sec: [], tok: [], ok: [], failed: [], samples: null, server: null, gpu: null, last: null, polls: 0, errors: 0, charts: {}, steps: [], verdict: null, timer: null };
  window.llmView = st; // for tests and curious users

  function $(id) { return document.getElementById(id); }
  function fmt(v, digits) {
    if (v === null || v === undefined || !isFinite(v)) return "-";
    var a = Math.abs(v);
    if (a >= 1000) return Math.round(v).toLocaleString("en-US");
    if (a >= 100) return v.toFixed(0);
    if (a === 0) return "0";
    return String(Number(v.toPrecision(digits || 3)));
  }
  function ms(v) { return v === null || v === undefined ? "-" : fmt(v * 1000); }
  function text(id, s) { var e = $(id); if (e && e.textContent !== s) e.textContent = s; }
  function el(tag, txt, cls) { var e = document.createElement(tag); if (txt !== undefined && txt !== null) e.textContent = txt; if (cls) e.className = cls; return e; }
  function row(cells, cls) { var tr = el("tr", null, cls); cells.forEach(function (c) { if (c instanceof Node) { var td = el("td"); td.appendChild(c); tr.appendChild(td); } else tr.appendChild(el("td", c)); }); return tr; }
  function fill(tbody, rows) { tbody.replaceChildren.apply(tbody, rows); }

  // ---- keeping the data ----

  function mergeSeries(s) {
    if (!s || !s.sec.length) return;
    var first = s.sec[0], i = st.sec.length;
    while (i > 0 && st.sec[i - 1] >= first) i--; // re-sent tail: replace from its first second on
    st.sec.length = i; st.tok.length = i; st.ok.length = i; st.failed.length = i;
    Array.prototype.push.apply(st.sec, s.sec); Array.prototype.push.apply(st.tok, s.tokens);
    Array.prototype.push.apply(st.ok, s.ok); Array.prototype.push.apply(st.failed, s.failed);
  }
  function appendCols(dst, src) {
    if (!src) return dst;
    if (!dst) { dst = {}; for (var k0 in src) dst[k0] = Array.isArray(src[k0]) ? src[k0].slice() : src[k0]; return dst; }
    for (var k in src) { if (Array.isArray(src[k])) Array.prototype.push.apply(dst[k], src[k]); else dst[k] = src[k]; }
    return dst;
  }
  function movingAvg(xs, w) {
    var out = new Array(xs.length), acc = 0;
    for (var i = 0; i < xs.length; i++) { acc += xs[i]; if (i >= w) acc -= xs[i - w]; out[i] = acc / Math.min(i + 1, w); }
    return out;
  }
  function toMs(xs) { return xs.map(function (v) { return v === null ? null : v * 1000; }); }
  function last(xs) { return xs && xs.length ? xs[xs.length - 1] : null; }

  // ---- charts ----

  function stepBands() {
    return { hooks: { drawClear: [function (u) {
      var ctx = u.ctx, b = u.bbox, steps = st.steps, now = st.last ? st.last.now : 0;
      if (!steps.length) return;
      ctx.save(); ctx.beginPath(); ctx.rect(b.left, b.top, b.width, b.height); ctx.clip();
      steps.forEach(function (s) {
        var x0 = u.valToPos(s.started, "x", true), xm = u.valToPos(s.measured_from || now, "x", true);
        var x1 = u.valToPos(s.ended || now, "x", true);
        ctx.fillStyle = "rgba(120,130,150,0.13)"; ctx.fillRect(x0, b.top, Math.max(0, xm - x0), b.height); // warm-up
        var flagged = s.flags && s.flags.length, slo = s.slo_broken && s.slo_broken.length;
        if (s.measured_from) {
          ctx.fillStyle = flagged ? "rgba(179,38,30,0.14)" : slo ? "rgba(178,106,0,0.12)" : "rgba(27,127,59,0.05)";
          ctx.fillRect(xm, b.top, Math.max(0, x1 - xm), b.height);
        }
        ctx.strokeStyle = "rgba(60,70,90,0.5)"; ctx.setLineDash([4, 4]); ctx.beginPath(); ctx.moveTo(x0, b.top); ctx.lineTo(x0, b.top + b.height); ctx.stroke(); ctx.setLineDash([]);
        ctx.fillStyle = flagged ? "#b3261e" : "#3c465a"; ctx.font = (11 * devicePixelRatio) + "px system-ui, sans-serif";
        ctx.fillText("S" + s.step + " " + fmt(s.offered, 4), x0 + 3 * devicePixelRatio, b.top + 12 * devicePixelRatio);
      });
      ctx.restore();
    }] } };
  }

  function makeChart(id, series, axes, withSteps) {
    var host = $(id);
    var opts = {
      width: Math.max(300, host.clientWidth - 4), height: 210,
      scales: { x: { time: true } },
      series: [{}].concat(series),
      axes: [{}].concat(axes),
      legend: { live: true },
      plugins: withSteps ? [stepBands()] : [],
    };
    var data = [[]].concat(series.map(function () { return []; }));
    var u = new uPlot(opts, data, host);
    st.charts[id] = u;
    return u;
  }

  function ensureCharts() {
    if (st.charts["chart-throughput"]) return;
    makeChart("chart-throughput", [
      { label: "tok/s", stroke: "rgba(31,119,180,0.35)", width: 1, scale: "tok" },
      { label: "tok/s " + SMOOTH_S + " s avg", stroke: "#1f77b4", width: 2, scale: "tok" },
      { label: "req/s", stroke: "#2ca02c", width: 1.5, scale: "rps" },
      { label: "failed/s", stroke: "#d62728", width: 1.5, scale: "rps" },
    ], [{ scale: "tok", label: "tokens/s" }, { scale: "rps", side: 1, label: "requests/s", grid: { show: false } }], true);
    makeChart("chart-ttft", [
      { label: "TTFT p50", stroke: "#1f77b4", width: 1.5 }, { label: "TTFT p99", stroke: "#1f77b4", dash: [5, 4], width: 1.5 },
      { label: "E2E p50", stroke: "#9467bd", width: 1.5 }, { label: "E2E p99", stroke: "#9467bd", dash: [5, 4], width: 1.5 },
    ], [{ label: "ms" }], true);
    makeChart("chart-itl", [
      { label: "ITL p50", stroke: "#ff7f0e", width: 1.5 }, { label: "ITL p99", stroke: "#ff7f0e", dash: [5, 4], width: 1.5 },
      { label: "TPOT p50", stroke: "#17becf", width: 1.5 }, { label: "TPOT p99", stroke: "#17becf", dash: [5, 4], width: 1.5 },
    ], [{ label: "ms" }], true);
    makeChart("chart-load", [
      { label: "users", stroke: "#3c465a", width: 1.5 }, { label: "in flight", stroke: "#e377c2", width: 1.5 },
    ], [{ label: "count" }], true);
  }

  function ensureServerCharts(p) {
    if (p.server && !st.charts["chart-server"]) {
      $("panel-server").hidden = false;
      makeChart("chart-server", [
        { label: "KV cache %", stroke: "#8c564b", width: 2, scale: "%" },
        { label: "running", stroke: "#2ca02c", width: 1.5, scale: "n" }, { label: "waiting", stroke: "#d62728", width: 1.5, scale: "n" },
      ], [{ scale: "%", label: "%" }, { scale: "n", side: 1, label: "requests", grid: { show: false } }], false);
    }
    if (p.gpu && !st.charts["chart-gpu"]) {
      $("panel-gpu").hidden = false;
      makeChart("chart-gpu", [
        { label: "memory GiB", stroke: "#7f7f7f", width: 2, scale: "gib" }, { label: "utilisation %", stroke: "#bcbd22", width: 1.5, scale: "%" },
      ], [{ scale: "gib", label: "GiB" }, { scale: "%", side: 1, label: "%", grid: { show: false } }], false);
    }
  }

  function drawCharts() {
    var x = st.sec.map(function (s) { return s + 0.5; });
    st.charts["chart-throughput"].setData([x, st.tok, movingAvg(st.tok, SMOOTH_S), st.ok, st.failed]);
    var s = st.samples;
    if (s) {
      st.charts["chart-ttft"].setData([s.t, toMs(s.ttft_p50), toMs(s.ttft_p99), toMs(s.e2e_p50), toMs(s.e2e_p99)]);
      st.charts["chart-itl"].setData([s.t, toMs(s.itl_p50), toMs(s.itl_p99), toMs(s.tpot_p50), toMs(s.tpot_p99)]);
      st.charts["chart-load"].setData([s.t, s.users, s.in_flight]);
    }
    if (st.server && st.charts["chart-server"]) st.charts["chart-server"].setData([st.server.t, st.server.kv, st.server.running, st.server.waiting]);
    if (st.gpu && st.charts["chart-gpu"]) st.charts["chart-gpu"].setData([st.gpu.t, st.gpu.mem_gib, st.gpu.util]);
  }

  // ---- tiles and tables ----

  function setTile(id, cls) { var t = $(id); if (t) { t.classList.remove("bad", "good", "warn"); if (cls) t.classList.add(cls); } }

  // -t in web mode: each start stops that long after it (runtime/webui RunClock)
  function runTimeText(c) {
    if (!c.run_time) return "";
    if (c.stops_at) return "stops at " + new Date(c.stops_at * 1000).toLocaleTimeString() + " (-t " + fmt(c.run_time) + " s)";
    return "-t " + fmt(c.run_time) + " s: each start stops after that long";
  }

  function render(p) {
    var state = p.state || "?";
    var se = $("llm-state"); se.dataset.state = state; text("llm-state", state);
    text("llm-host", p.control.host ? "target " + p.control.host : "");
    text("llm-runtime", runTimeText(p.control));
    var running = state === "running" || state === "spawning";
    $("llm-start").disabled = running || state === "stopping";
    $("llm-stop").disabled = !running;
    $("llm-users-form").hidden = !!p.control.shape;
    var uc = $("llm-user-count"), sr = $("llm-spawn-rate");
    if (!uc.value && p.control.users !== null) uc.value = p.control.users;
    if (!sr.value && p.control.spawn_rate !== null) sr.value = p.control.spawn_rate;

    var r = p.recent, t = p.totals;
    document.querySelectorAll(".wlen").forEach(function (e) { e.textContent = fmt(r.window_s); });
    text("llm-window", "(last " + fmt(r.window_s) + " s)");
    text("llm-tps", fmt(r.output_tokens_per_s));
    text("llm-tps-run", "run: " + fmt(t.output_tokens_per_s) + " tok/s, " + t.tokens_out.toLocaleString("en-US") + " tokens");
    text("llm-rps", fmt(r.requests_per_s));
    text("llm-rps-run", "run: " + fmt(t.requests_per_s) + " req/s; failed " + fmt(r.failures_per_s) + "/s now");
    text("llm-inflight", p.in_flight + " / " + p.users);
    text("llm-users", p.workers ? p.workers.length + " worker(s)" : "local runner");
    text("llm-finished", t.finished.toLocaleString("en-US"));
    text("llm-counts", "sent " + t.sent + ", ok " + t.ok + ", failed " + t.failed + (t.cancelled ? ", cancelled " + t.cancelled : "") + " (" + fmt(t.error_rate * 100) + "% errors)");

    var c = p.client;
    text("llm-client", c.valid ? (c.valid_now ? "valid" : "lagging now") : "SUSPECT");
    setTile("tile-client", c.valid ? (c.valid_now ? "good" : "warn") : "bad");
    text("llm-client-detail", c.line + " (recent loop lag p99 " + ms(c.loop_lag_p99_recent) + " ms)" + (c.over_ceiling && c.over_ceiling.length ? "; OVER CEILING: " + c.over_ceiling.join("; ") : ""));
    if (c.rule && $("tile-client")) { $("tile-client").title = c.rule; }  // sent with the first poll only

    if (!t.length_checked) { text("llm-length", "not checked"); setTile("tile-length", null); text("llm-length-detail", "no requested length (--no-force-length?)"); }
    else if (t.length_mismatch) { text("llm-length", t.length_mismatch + " mismatched"); setTile("tile-length", "bad"); text("llm-length-detail", "of " + t.length_checked + " checked"); }
    else { text("llm-length", "all match"); setTile("tile-length", "good"); text("llm-length-detail", t.length_checked + " checked"); }

    // latency table
    fill($("llm-latency").tBodies[0], LAT.map(function (m) {
      var rec = r.latency[m] || {}, run = p.latency[m] || {};
      return row([LAT_NAME[m], ms(rec.p50), ms(rec.p99), ms(run.p50), ms(run.p90), ms(run.p99), ms(run.mean), ms(run.max), run.count ? run.count.toLocaleString("en-US") : "0"]);
    }).concat(PHASES.filter(function (ph) { return p.latency[ph[0]]; }).map(function (ph) {
      var run = p.latency[ph[0]];
      return row(["phase: " + ph[1], "-", "-", ms(run.p50), ms(run.p90), ms(run.p99), ms(run.mean), ms(run.max), run.count.toLocaleString("en-US")]);
    })));

    renderLadder(p);
    renderCache(p);

    // failures
    var kinds = Object.keys(p.failures);
    fill($("llm-failures").tBodies[0], kinds.length ? kinds.map(function (k) {
      var f = p.failures[k], td = el("td", null, "msg");
      f.texts.forEach(function (tx, i) { if (i) td.appendChild(el("br")); td.appendChild(document.createTextNode(tx[1] + "x  " + tx[0])); });
      var tr = row([k, String(f.n)]); tr.appendChild(td); return tr;
    }) : [row(["none", "0", ""])]);

    // workers
    if (p.workers) {
      $("panel-workers").hidden = false;
      fill($("llm-workers").tBodies[0], p.workers.map(function (w) {
        return row([w.index === null ? w.id : String(w.index), w.state, fmt(w.cpu), fmt(w.report_age), String(w.in_flight), String(w.finished)], w.cpu >= 90 ? "flagged" : "");
      }));
    }

    // server / gpu latest
    if (st.server) {
      text("llm-server-kind", "(" + (st.server.kind || "unknown") + ")");
      var kv = last(st.server.kv), gen = last(st.server.gen_tps);
      text("llm-server-detail", st.server.t.length ? "now: KV cache " + fmt(kv) + "%, running " + fmt(last(st.server.running)) + ", waiting " + fmt(last(st.server.waiting)) + ", server generates " + fmt(gen) + " tok/s" : (st.server.error ? "no data: " + st.server.error : "no sample yet (read while a test runs)"));
    }
    if (st.gpu) {
      text("llm-gpu-detail", st.gpu.t.length ? "now: " + fmt(last(st.gpu.mem_gib)) + " of " + fmt(last(st.gpu.mem_total_gib)) + " GiB, utilisation " + fmt(last(st.gpu.util)) + "%" : (st.gpu.error ? "no data: " + st.gpu.error : "no sample yet"));
    }
  }

  function pctOf(v) { return v === null || v === undefined ? "-" : fmt(v * 100) + "%"; }

  function renderCache(p) {
    var c = p.cache;
    $("panel-cache").hidden = !c;
    if (c) {
      text("llm-cache", "served from the server's cache: " + c.cached_tokens.toLocaleString("en-US") + " of " +
        c.prompt_tokens.toLocaleString("en-US") + " prompt tokens (" + pctOf(c.hit_ratio) + ") over " + c.reported +
        " requests; ideal " + pctOf(c.ideal_hit_ratio) + ", achieved/ideal " + pctOf(c.achieved_vs_ideal) +
        "; hits " + c.hits + ", misses " + c.misses + "; TTFT p50 hit " + ms(c.ttft_hit_p50) + " ms, miss " + ms(c.ttft_miss_p50) + " ms");
    }
    var g = p.groups;
    $("panel-groups").hidden = !g;
    if (g) {
      var rows = [];
      ["endpoint", "model"].forEach(function (dim) {
        (g[dim] || []).forEach(function (r) {
          rows.push(row([dim + " " + r.key, String(r.ok), String(r.failed), fmt(r.output_tokens_per_s), ms(r.ttft_p50),
            ms(r.ttft_p99), ms(r.tpot_p50), ms(r.e2e_p50), pctOf(r.hit_ratio)], r.failed ? "flagged" : ""));
        });
      });
      fill($("llm-groups").tBodies[0], rows);
    }
  }

  function renderLadder(p) {
    var ld = p.ladder, s = p.step;
    if (!ld) {
      text("llm-step", "no ladder"); text("llm-step-detail", p.control.shape ? "load shape" : "closed loop, " + p.users + " users");
      text("llm-verdict", "-"); text("llm-verdict-detail", "run a --ladder to find it");
      return;
    }
    $("panel-ladder").hidden = false;
    text("llm-ladder-spec", ld.kind + " " + ld.levels.map(function (v) { return fmt(v, 4); }).join(", ") + " " + ld.unit + "; warm-up " + fmt(ld.warmup) + " s, step " + fmt(ld.duration) + " s");
    if (s) {
      text("llm-step", s.index + "/" + s.of + ": " + fmt(s.level, 4) + " " + s.unit);
      var detail = ld.done ? "ladder done: " + (ld.stop_reason || "") : s.phase === "warmup" ? "warm-up " + fmt(s.elapsed) + " / " + fmt(s.warmup) + " s" : s.phase + " " + fmt(s.elapsed) + " / " + fmt(s.planned) + " s";
      text("llm-step-detail", detail);
    } else { text("llm-step", "not started"); text("llm-step-detail", ld.levels.length + " steps planned"); }
    var flaggedNow = false, steps = st.steps;
    fill($("llm-steps").tBodies[0], steps.map(function (r, i) {
      // a finished step's flags are final (the results' flags); the running step's are "so far"
      var flags = el("span"), bad = r.flags && r.flags.length, slo = r.slo_broken && r.slo_broken.length;
      var done = r.phase === "done", sofar = done ? "" : " so-far";
      (r.flags || []).forEach(function (f) { var b = el("span", f, "flag" + sofar); b.title = (BAD_FLAGS[f] || f) + (done ? "" : " (so far: the step is running)"); flags.appendChild(b); });
      if (slo) { var b = el("span", "slo", "flag slo" + sofar); b.title = r.slo_broken.join("; "); flags.appendChild(b); }
      if (!bad && !slo && r.phase !== "warmup") flags.appendChild(el("span", "ok", "ok-badge"));
      if (bad && i === steps.length - 1) flaggedNow = true;
      var cls = (bad ? (done ? "flagged" : "flagged-so-far") : slo ? (done ? "slo" : "slo-so-far") : "") + (i === steps.length - 1 && !ld.done ? " current" : "");
      if (r.phase === "warmup") return row([String(r.step), fmt(r.offered, 4), "warm-up", "", "", "", "", "", "", "", "", flags], cls);
      return row([String(r.step), fmt(r.offered, 4), r.phase, fmt(r.requests_per_s), fmt(r.output_tokens_per_s),
        ms(r.ttft_p50) + " / " + ms(r.ttft_p99), ms(r.itl_p50) + " / " + ms(r.itl_p99), ms(r.tpot_p50), ms(r.e2e_p99),
        fmt(r.error_rate * 100), fmt(r.goodput_requests_per_s), flags], cls);
    }));
    setTile("tile-step", flaggedNow ? (steps[steps.length - 1].phase === "done" ? "bad" : "warn") : null);
    var v = st.verdict;
    if (!v) { text("llm-verdict", "pending"); text("llm-verdict-detail", "known once steps finish (" + (steps.length ? "step " + steps.length + " running" : "not started") + ")"); setTile("tile-verdict", null); text("llm-verdict-text", ""); return; }
    if (v.found) {
      text("llm-verdict", fmt(v.offered, 4) + " " + ld.unit);
      text("llm-verdict-detail", (v.final ? "" : "so far: ") + "step " + v.step + ", by " + v.knee_by + ", " + fmt(v.output_tokens_per_s) + " tok/s" + (v.max_slo_load !== null ? "; SLOs met up to " + fmt(v.max_slo_load, 4) : ""));
      setTile("tile-verdict", v.final ? "good" : "warn");
    } else {
      text("llm-verdict", v.final ? "not found" : "not yet");
      text("llm-verdict-detail", v.steps_used + " step(s) finished" + (v.steps_used < v.min_steps ? ", needs " + v.min_steps : "") + (v.final ? "; why: below the steps" : "; details below the steps"));
      setTile("tile-verdict", null);
    }
    text("llm-verdict-text", (v.final ? "" : "(provisional: from the finished steps)\n") + v.text);
  }

  // ---- polling and controls ----

  function showError(msg) { var e = $("llm-error"); e.hidden = !msg; e.textContent = msg || ""; }

  function ingest(p) {
    mergeSeries(p.series);
    st.samples = appendCols(st.samples, p.samples);
    if (p.server) st.server = appendCols(st.server, p.server);
    if (p.gpu) st.gpu = appendCols(st.gpu, p.gpu);
    if (p.ladder) {
      var byStep = {};
      st.steps.forEach(function (r) { byStep[r.step] = r; });
      p.ladder.steps.forEach(function (r) { byStep[r.step] = r; });
      st.steps = Object.keys(byStep).map(Number).sort(function (a, b) { return a - b; }).map(function (k) { return byStep[k]; });
      if ("verdict" in p.ladder) st.verdict = p.ladder.verdict;
    }
    st.since = p.now;
    st.last = p;
    st.polls++;
  }

  function poll() {
    clearTimeout(st.timer);
    if (document.hidden) { st.timer = setTimeout(poll, HIDDEN_MS); return; }
    fetch("./llm/data?since=" + encodeURIComponent(st.since), { cache: "no-store" })
      .then(function (r) { if (!r.ok) throw new Error("HTTP " + r.status); return r.json(); })
      .then(function (p) { ingest(p); ensureCharts(); ensureServerCharts(p); render(p); drawCharts(); showError(""); })
      .catch(function (e) { st.errors++; showError("cannot read ./llm/data: " + e.message + " (is Locust still running?)"); })
      .then(function () { st.timer = setTimeout(poll, POLL_MS); });
  }

  function post(path, params) {
    return fetch(path, { method: "POST", body: params || new URLSearchParams() })
      .then(function (r) { return r.json().catch(function () { return {}; }); })
      .then(function (j) { if (j && j.success === false) showError(j.message || "refused"); setTimeout(poll, 300); return j; })
      .catch(function (e) { showError(path + ": " + e.message); });
  }

  $("llm-start").addEventListener("click", function () {
    var p = st.last, params = new URLSearchParams();
    if (!p || !p.control.shape) {
      params.set("user_count", $("llm-user-count").value || "1");
      params.set("spawn_rate", $("llm-spawn-rate").value || "1");
    }
    $("llm-start").disabled = true;
    post("./swarm", params);
  });
  $("llm-stop").addEventListener("click", function () { $("llm-stop").disabled = true; post("./stop"); });
  document.addEventListener("visibilitychange", function () { if (!document.hidden) poll(); });
  window.addEventListener("resize", function () {
    Object.keys(st.charts).forEach(function (id) { var u = st.charts[id]; u.setSize({ width: Math.max(300, $(id).clientWidth - 4), height: 210 }); });
  });
  poll();
})();
