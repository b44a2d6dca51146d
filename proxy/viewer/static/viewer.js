// tapeproxy's cassette viewer. The pages are whole without it; on a running server's page
// (body[data-poll]) it asks for the server's stamp every two seconds and, when an exchange
// has happened since, fetches the page again and puts its <main> in place. The new page is
// parsed by DOMParser, which runs no script, and the server escaped everything in it.
//
// A click anywhere on a row of a table.linked (the library's cassettes, a cassette's
// exchanges) opens what the row's link opens, as a row does in mitmweb. The link stays the
// way in for the keyboard (Tab, Enter) and for "open in a new tab"; a click on the link
// itself, or one that ends a text selection, is left alone. One listener on the document,
// so rows a refresh put in place work too.
"use strict";
(function () {
  document.addEventListener("click", function (event) {
    const target = event.target;
    if (event.defaultPrevented || event.button !== 0 || !(target instanceof Element)) {
      return;
    }
    const row = target.closest("table.linked tbody tr");
    if (!row || target.closest("a, button, input, select, textarea, label")) {
      return;
    }
    const link = row.querySelector("a[href]");
    if (!link || String(window.getSelection() || "") !== "") {
      return;
    }
    if (event.ctrlKey || event.metaKey || event.shiftKey) {
      window.open(link.href, "_blank", "noopener");
    } else {
      window.location.assign(link.href);
    }
  });

  const poll = document.body.dataset.poll;
  if (!poll) {
    return;
  }
  let last = null;
  async function refresh() {
    try {
      const answer = await fetch(poll, { cache: "no-store" });
      const { stamp } = await answer.json();
      if (last !== null && stamp !== last) {
        const page = await fetch(window.location.href, { cache: "no-store" });
        const parsed = new DOMParser().parseFromString(await page.text(), "text/html");
        const fresh = parsed.getElementById("main");
        if (fresh) {
          document.getElementById("main").replaceWith(document.adoptNode(fresh));
        }
      }
      last = stamp;
    } catch (error) {
      // The server stopped or is restarting: try again at the next tick.
    }
    window.setTimeout(refresh, 2000);
  }
  refresh();
})();
