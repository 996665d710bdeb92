/* A shared object that is not a gradcheck plugin: no
 * tg_gradcheck_plugin_register. tapegrad-gradcheck must refuse it with
 * exit status 2 and the reason. */
int not_a_plugin(void);
int not_a_plugin(void) { return 42; }
