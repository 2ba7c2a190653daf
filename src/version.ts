/** The package version; a test checks it against package.json. */
export const VERSION = '0.1.0';
