/* pyprof report: draw the figures (Plotly, inlined above), then make the tables sortable and
   filterable. Plain JavaScript; nothing is fetched. */
(function () {
  "use strict";
  var CONFIG = { displaylogo: false, responsive: true, typesetMath: false, modeBarButtonsToRemove: ["select2d", "lasso2d"] };
  var MARKS = ".point, .slice, .js-line";

  function drawFigures() {
    var holder = document.getElementById("pyprof-figures");
    if (!holder || typeof Plotly === "undefined") { return; }
    var figures = JSON.parse(holder.textContent);
    Object.keys(figures).forEach(function (id) {
      var el = document.getElementById(id);
      if (!el) { return; }
      var fig = figures[id];
      Plotly.newPlot(el, fig.data, fig.layout, CONFIG).then(function (gd) {
        gd.setAttribute("data-marks", String(gd.querySelectorAll(MARKS).length));
      });
    });
  }

  function cellValue(row, i, numeric) {
    var cell = row.cells[i];
    if (!cell) { return numeric ? -Infinity : ""; }
    var v = cell.getAttribute("data-v");
    if (numeric) {
      var x = v === null || v === "" ? NaN : parseFloat(v);
      return isNaN(x) ? -Infinity : x;
    }
    return (v !== null ? v : cell.textContent).toLowerCase();
  }

  function makeSortable(table) {
    var heads = table.tHead ? table.tHead.rows[0].cells : [];
    Array.prototype.forEach.call(heads, function (th, i) {
      th.addEventListener("click", function () {
        var numeric = th.classList.contains("num");
        var desc = !th.classList.contains("desc");
        Array.prototype.forEach.call(heads, function (h) { h.classList.remove("asc", "desc"); });
        th.classList.add(desc ? "desc" : "asc");
        var body = table.tBodies[0];
        var rows = Array.prototype.slice.call(body.rows);
        rows.sort(function (a, b) {
          var x = cellValue(a, i, numeric), y = cellValue(b, i, numeric);
          var c = x < y ? -1 : x > y ? 1 : 0;
          return desc ? -c : c;
        });
        rows.forEach(function (r) { body.appendChild(r); });
      });
    });
  }

  function makeFilter(input) {
    var table = document.getElementById(input.getAttribute("data-table"));
    var counter = document.getElementById(input.getAttribute("data-table") + "-count");
    if (!table) { return; }
    input.addEventListener("input", function () {
      var q = input.value.toLowerCase().trim();
      var shown = 0;
      Array.prototype.forEach.call(table.tBodies[0].rows, function (r) {
        var hit = !q || r.textContent.toLowerCase().indexOf(q) >= 0;
        r.style.display = hit ? "" : "none";
        if (hit) { shown += 1; }
      });
      if (counter) { counter.textContent = shown + " of " + table.tBodies[0].rows.length + " rows"; }
    });
  }

  document.querySelectorAll("table.sortable").forEach(makeSortable);
  document.querySelectorAll("input.filter").forEach(makeFilter);
  drawFigures();
})();
