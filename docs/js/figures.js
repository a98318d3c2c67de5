// Each tutorial figure is its PNG; where the page runs JavaScript, plotly.js (copied into the site from
// the plotly package, so offline too) draws the interactive figure from the JSON beside the picture.
(function () {
  const figures = document.querySelectorAll(".sinklab-figure");
  if (!figures.length) return;
  const script = document.createElement("script");
  script.src = document.currentScript.src.replace(/figures\.js$/, "plotly.min.js");
  script.onload = function () {
    figures.forEach(function (div) {
      const data = div.querySelector('script[type="application/json"]');
      if (!data) return;
      const figure = JSON.parse(data.textContent);
      const img = div.querySelector("img");
      const plot = document.createElement("div");
      div.appendChild(plot);
      window.Plotly.newPlot(plot, figure.data, figure.layout, {responsive: true}).then(function () {
        if (img) img.remove();
      });
    });
  };
  document.head.appendChild(script);
})();
