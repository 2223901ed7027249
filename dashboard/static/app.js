"use strict";
// weft dashboard: renders /api/status and /api/history; no libraries.

const $ = (id) => document.getElementById(id);

function size(n) {
  const u = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return (i === 0 ? n.toFixed(0) : n.toFixed(1)) + " " + u[i];
}
function count(n) {
  if (n >= 1e9) return (n / 1e9).toFixed(1) + " G";
  if (n >= 1e6) return (n / 1e6).toFixed(1) + " M";
  if (n >= 1e4) return (n / 1e3).toFixed(1) + " k";
  return Math.round(n).toString();
}
function dur(s) {
  if (s < 120) return Math.round(s) + " s";
  if (s < 7200) return Math.round(s / 60) + " min";
  if (s < 172800) return (s / 3600).toFixed(1) + " h";
  return (s / 86400).toFixed(1) + " d";
}
function cell(tr, text, cls) {
  const td = document.createElement("td");
  td.textContent = text;
  if (cls) td.className = cls;
  tr.appendChild(td);
  return td;
}
function rows(tableId, items, fill) {
  const body = $(tableId).tBodies[0];
  body.replaceChildren();
  for (const it of items) {
    const tr = document.createElement("tr");
    fill(tr, it);
    body.appendChild(tr);
  }
}
function state(up) { return up ? ["UP", "up"] : ["DOWN", "down"]; }

function renderStatus(r) {
  $("fsid").textContent = r.fsid;
  const h = $("health");
  h.textContent = r.healthy ? "HEALTHY" : "PROBLEMS";
  h.className = "badge " + (r.healthy ? "ok" : "bad");
  $("problems").replaceChildren(...r.problems.map((p) => {
    const li = document.createElement("li");
    li.textContent = p;
    return li;
  }));
  let used = 0, total = 0, objects = 0, up = 0;
  const seen = new Set();
  for (const t of r.targets) {
    objects += t.objects;
    if (!t.up) continue;
    up++;
    used += t.used;
    if (t.device) {
      if (seen.has(t.device)) continue;
      seen.add(t.device);
    }
    total += t.total;
  }
  $("capacity").textContent = size(used) + " of " + size(total);
  $("capacity-bar").firstElementChild.style.width = (total ? Math.min(100, 100 * used / total) : 0) + "%";
  $("inodes").textContent = count(r.meta.inodes);
  $("objects").textContent = count(objects) + " objects on the targets";
  $("targets-up").textContent = up + " / " + r.targets.length;
  $("servers-up").textContent = r.storage_servers.filter((s) => s.up).length + " of " + r.storage_servers.length + " storage servers up";
  $("clients-count").textContent = r.clients.length;
  $("handles").textContent = r.clients.reduce((a, c) => a + c.open_handles, 0) + " open files";
  $("meta-version").textContent = r.meta.version + ", up " + dur(r.meta.uptime_seconds);
  $("meta-replica").textContent = r.replica
    ? "replicated: member " + r.replica.id + ", leader " + r.replica.leader + ", term " + r.replica.term + ", applied " + r.replica.applied
    : "single server (not replicated)";
  rows("targets", r.targets, (tr, t) => {
    tr.dataset.targetId = t.id;
    cell(tr, "target-" + t.id);
    cell(tr, t.addr);
    const [s, c] = state(t.up);
    cell(tr, s, c);
    cell(tr, size(t.used), "num");
    cell(tr, size(t.total), "num");
    const w = cell(tr, "", "w");
    const bar = document.createElement("div");
    bar.className = "bar";
    const fillDiv = document.createElement("div");
    fillDiv.style.width = (t.used + t.free ? 100 * t.used / (t.used + t.free) : 0) + "%";
    bar.appendChild(fillDiv);
    w.appendChild(bar);
    cell(tr, count(t.objects), "num");
    cell(tr, count(t.files_free), "num");
    cell(tr, size(t.io.ReadBytes), "num");
    cell(tr, size(t.io.WriteBytes), "num");
  });
  rows("servers", r.storage_servers, (tr, s) => {
    cell(tr, s.addr);
    const [st, c] = state(s.up);
    cell(tr, st, c);
    cell(tr, s.targets.map((id) => "target-" + id).join(", "));
  });
  rows("clients", r.clients, (tr, c) => {
    tr.dataset.session = c.session;
    cell(tr, c.name);
    cell(tr, c.addr);
    cell(tr, c.session.slice(0, 8));
    cell(tr, dur(c.age_seconds), "num");
    cell(tr, c.open_handles, "num");
    cell(tr, c.lease_left_seconds.toFixed(1) + " s", "num");
    cell(tr, c.version || "unknown");
  });
  $("updated").textContent = "updated " + new Date().toLocaleTimeString();
}

// chart draws series (arrays of numbers, one per sample) as lines scaled
// to their common maximum.
function chart(id, samples, series, fmt) {
  const svg = $(id);
  const W = 600, H = 160, pad = 14;
  let max = 0;
  for (const s of series) for (const v of samples.map(s.get)) max = Math.max(max, v);
  const parts = ['<line class="axis" x1="0" y1="' + (H - pad) + '" x2="' + W + '" y2="' + (H - pad) + '"/>'];
  if (samples.length > 1 && max > 0) {
    for (const s of series) {
      const pts = samples.map((x, i) => (i * W / (samples.length - 1)).toFixed(1) + "," +
        (H - pad - (s.get(x) / max) * (H - 2 * pad)).toFixed(1));
      parts.push('<polyline class="' + s.cls + '" points="' + pts.join(" ") + '"/>');
    }
  }
  parts.push('<text x="4" y="12">' + (max > 0 ? "max " + fmt(max) : samples.length > 1 ? "idle" : "collecting…") + "</text>");
  svg.innerHTML = parts.join("");
  const last = samples[samples.length - 1];
  $(id + "-now").textContent = last ? "now: " + series.map((s) => s.name + " " + fmt(s.get(last))).join(", ") : "";
}

function renderHistory(h) {
  const s = h.samples;
  chart("chart-bytes", s, [
    { name: "read", cls: "read", get: (x) => x.read_bytes_per_s },
    { name: "write", cls: "write", get: (x) => x.write_bytes_per_s },
  ], (v) => size(v) + "/s");
  chart("chart-iops", s, [
    { name: "reads", cls: "read", get: (x) => x.reads_per_s },
    { name: "writes", cls: "write", get: (x) => x.writes_per_s },
  ], (v) => count(v) + "/s");
  chart("chart-meta", s, [{ name: "requests", cls: "read", get: (x) => x.meta_requests_per_s }], (v) => count(v) + "/s");
}

function renderJobs(jobs) {
  const now = Date.now();
  rows("jobs", jobs, (tr, j) => {
    cell(tr, j.job);
    cell(tr, count(j.requests));
    cell(tr, count(j.meta_requests));
    cell(tr, size(j.read_bytes));
    cell(tr, size(j.write_bytes));
    cell(tr, (j.mean_latency_seconds * 1000).toFixed(2) + " ms");
    cell(tr, dur(Math.max(0, (now - Date.parse(j.last_seen)) / 1000)) + " ago");
  });
}

async function refresh() {
  try {
    const [st, hi, jo] = await Promise.all([fetch("api/status"), fetch("api/history"), fetch("api/jobs")]);
    if (!st.ok) throw new Error(await st.text());
    renderStatus(await st.json());
    renderHistory(await hi.json());
    if (jo.ok) renderJobs(await jo.json());
  } catch (e) {
    const h = $("health");
    h.textContent = "UNREACHABLE";
    h.className = "badge bad";
    $("problems").replaceChildren(Object.assign(document.createElement("li"), { textContent: String(e) }));
  }
}

refresh();
setInterval(refresh, 5000);
