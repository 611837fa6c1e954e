// Search for a docs site opened from disk (file://), where browsers refuse to start a Web Worker.
// Material's search runs in a worker; on file:// this runs that worker's script in a hidden iframe instead,
// with the two functions a worker has and a page lacks (postMessage to its parent, importScripts), and
// carries the messages both ways. Over http(s) it does nothing. Our own few lines, in place of the shim
// Material's offline plugin would load from a CDN (mkdocs.yml: extra.polyfills names this file, so the plugin
// adds no other): the site loads nothing from another origin.
(function () {
  "use strict";
  if (location.protocol !== "file:") return;

  function workerRuntime() {
    // runs inside the iframe: what a worker script expects to find
    window.postMessage = function (data) { parent.postMessage(data, "*"); };
    window.importScripts = function () {
      // a worker loads synchronously; here each script is appended in order and the next waits for it
      var urls = Array.prototype.slice.call(arguments);
      return urls.reduce(function (done, url) {
        return done.then(function () {
          return new Promise(function (resolve) {
            var script = document.createElement("script");
            script.src = url;
            script.onload = resolve;
            document.body.appendChild(script);
          });
        });
      }, Promise.resolve());
    };
  }

  function IframeWorker(url) {
    var self = this;
    var target = document.createElement("div"); // an event target the page's listeners attach to
    this.addEventListener = target.addEventListener.bind(target);
    this.removeEventListener = target.removeEventListener.bind(target);
    this.dispatchEvent = target.dispatchEvent.bind(target);
    this.onmessage = null;
    this.onerror = null;
    this.iframe = document.createElement("iframe");
    this.iframe.hidden = true;
    document.body.appendChild(this.iframe);
    var frame = this.iframe.contentWindow;
    frame.document.open();
    frame.document.write(
      "<html><body><script>(" + workerRuntime + ")();</script>" +
      "<script src=\"" + String(url) + "\"></script></body></html>"
    );
    frame.document.close();
    this.ready = new Promise(function (resolve) { frame.onload = resolve; });
    window.addEventListener("message", function (event) {
      if (event.source !== self.iframe.contentWindow) return;
      var message = new MessageEvent("message", { data: event.data });
      self.dispatchEvent(message);
      if (self.onmessage) self.onmessage(message);
    });
  }
  IframeWorker.prototype.postMessage = function (data) {
    var frame = this.iframe.contentWindow;
    this.ready.then(function () {
      frame.dispatchEvent(new MessageEvent("message", { data: structuredClone(data) }));
    });
  };
  IframeWorker.prototype.terminate = function () { this.iframe.remove(); };

  window.Worker = IframeWorker;
})();
