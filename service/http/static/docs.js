// Swagger UI over this service's OpenAPI schema (service/http/api_docs.py). Everything it loads comes from
// this origin: the schema, Swagger UI's own files (shipped in a Python package) and this script; the page's
// Content-Security-Policy allows nothing else. "Authorize" takes the API key (the bearer scheme the schema
// declares when the service has one) and keeps it in this page's memory only.
"use strict";

window.addEventListener("DOMContentLoaded", function () {
  const root = document.getElementById("swagger-ui");
  window.ui = window.SwaggerUIBundle({
    url: root.dataset.openapi, // relative: resolves next to /docs, also behind a path prefix
    domNode: root,
    deepLinking: true,
    validatorUrl: null, // never send the schema to an outside validator
    persistAuthorization: false, // the key is gone when the page is
    presets: [window.SwaggerUIBundle.presets.apis, window.SwaggerUIBundle.SwaggerUIStandalonePreset],
    layout: "BaseLayout",
  });
});
