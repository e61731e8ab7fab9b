// The console's build: plain file names (no content hashes, no timestamps)
// so that rebuilding the same source gives the same bytes, which
// `make check-console` compares with the checked-in bundle.
import { defineConfig } from "vite";

export default defineConfig({
  base: "/console/",
  build: {
    outDir: "../hostd/console/dist",
    emptyOutDir: true,
    target: "es2020",
    sourcemap: false,
    reportCompressedSize: false,
    modulePreload: { polyfill: false },
    chunkSizeWarningLimit: 1024,
    rollupOptions: {
      output: {
        entryFileNames: "assets/[name].js",
        chunkFileNames: "assets/[name].js",
        assetFileNames: "assets/[name][extname]",
      },
    },
  },
});
