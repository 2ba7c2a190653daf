import './base.css';
import './graph.css';
import './lab.css';
import './panel.css';
